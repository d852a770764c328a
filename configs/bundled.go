package configs

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// bundled holds the files kvsim ships in its binary, at their paths under
// configs/: the default server and its trace, and the studies with their
// base configurations and trace, so that `kvsim sim`, `kvsim serve` and
// `kvsim study NAME` work from any directory, with or without a checkout
// of the repository.
//
//go:embed default.toml traces/NOTICE traces/mooncake_conversation.jsonl.zst
//go:embed studies/NOTICE studies/*.toml studies/chat_multiturn.jsonl.zst
var bundled embed.FS

// DefaultName is the name of the bundled default configuration, as
// errors and results show it.
const DefaultName = "default.toml"

// Bundled reports whether f is the bundled default configuration (from
// [Default]), whose trace is embedded too ([File.OpenBundledTrace]).
func (f *File) Bundled() bool { return f.bundled }

// OpenBundledTrace opens the embedded trace of the bundled default
// configuration; the caller closes it. It fails for any other file.
func (f *File) OpenBundledTrace() (io.ReadCloser, error) {
	if !f.bundled || f.Workload.Trace == "" {
		return nil, errors.New("configs: the file's trace is not bundled")
	}
	return bundled.Open(path.Clean(f.Workload.Trace))
}

// BundledStudies lists the names of the bundled studies (the study files
// of configs/studies/ without ".toml"; base configurations, named
// *_server.toml, are not studies), sorted.
func BundledStudies() []string {
	entries, err := fs.ReadDir(bundled, "studies")
	if err != nil {
		panic("configs: bundled studies: " + err.Error())
	}
	var names []string
	for _, e := range entries {
		n, ok := strings.CutSuffix(e.Name(), ".toml")
		if ok && !strings.HasSuffix(n, "_server") {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// BundledStudy writes the bundled files under dir (once: a folder named
// after their content, so a newer kvsim writes a new one) and returns the
// path of the bundled study name there. Studies need real files: each
// point opens its trace by path and hashes it. The folder keeps the
// layout of configs/, so the studies' relative paths (base =
// "../default.toml") resolve as in the repository.
func BundledStudy(dir, name string) (string, error) {
	if !slices.Contains(BundledStudies(), name) {
		return "", fmt.Errorf("no bundled study %q (bundled: %s)", name, strings.Join(BundledStudies(), ", "))
	}
	root, err := extractBundled(dir)
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "studies", name+".toml"), nil
}

// extractBundled copies the bundled files to dir/bundled-<digest>/ unless
// they are there already, and returns that folder. Each file is written
// to a temporary name and renamed, so a concurrent or interrupted run
// never leaves a partial file under the final name.
func extractBundled(dir string) (string, error) {
	h := sha256.New()
	var files []string
	err := fs.WalkDir(bundled, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := bundled.ReadFile(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %d\n", p, len(data))
		h.Write(data)
		files = append(files, p)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("bundled files: %w", err)
	}
	root := filepath.Join(dir, "bundled-"+hex.EncodeToString(h.Sum(nil))[:12])
	for _, p := range files {
		dst := filepath.Join(root, filepath.FromSlash(p))
		data, err := bundled.ReadFile(p)
		if err != nil {
			return "", fmt.Errorf("bundled files: %w", err)
		}
		if st, err := os.Stat(dst); err == nil && st.Size() == int64(len(data)) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return "", fmt.Errorf("extract bundled files: %w", err)
		}
		tmp, err := os.CreateTemp(filepath.Dir(dst), ".tmp-*")
		if err != nil {
			return "", fmt.Errorf("extract bundled files: %w", err)
		}
		_, werr := tmp.Write(data)
		cerr := tmp.Close()
		if err := errors.Join(werr, cerr); err != nil {
			os.Remove(tmp.Name())
			return "", fmt.Errorf("extract bundled files: %w", err)
		}
		if err := os.Rename(tmp.Name(), dst); err != nil {
			os.Remove(tmp.Name())
			return "", fmt.Errorf("extract bundled files: %w", err)
		}
	}
	return root, nil
}
