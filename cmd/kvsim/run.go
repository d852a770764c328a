package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"strings"
	"time"
)

// Exit codes shared by every subcommand.
const (
	exitOK    = 0
	exitFail  = 1 // the run itself failed (bad trace contents, I/O, check failed)
	exitUsage = 2 // bad flags, bad config, unknown subcommand
)

// command is one kvsim subcommand. Each subcommand lives in its own file and
// registers itself from an init function, so that independent subcommands do
// not edit a shared table.
type command struct {
	name    string // "plan", "trace", ...
	summary string // one line for the usage listing
	run     func(args []string, stdout, stderr io.Writer) int
}

var commands = map[string]*command{}

func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("kvsim: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

// version is set at build time with -ldflags "-X main.version=..."; it is
// written into machine-readable results.
var version = "dev"

func run(args []string, stdout, stderr io.Writer) int {
	out := &checkedWriter{w: stdout}
	name := "kvsim"
	if len(args) > 0 {
		name += " " + args[0]
	}
	code := dispatch(args, out, stderr)
	if out.err != nil && code == exitOK {
		// Every write to standard output is checked here, once for all
		// commands: a table that did not reach its reader is a failure.
		// (A command that noticed it has said so and exited non-zero.)
		fmt.Fprintf(stderr, "%s: %v\n", name, out.err)
		code = exitFail
	}
	return code
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return exitOK
	case "version", "-version", "--version":
		fmt.Fprintf(stdout, "kvsim %s\n", version)
		return exitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "kvsim: unknown command %q\n\n", args[0])
		usage(stderr)
		return exitUsage
	}
	return c.run(args[1:], stdout, stderr)
}

// checkedWriter remembers the first write error; after it, every write
// fails the same way (nothing more is attempted).
type checkedWriter struct {
	w   io.Writer
	err error
}

func (c *checkedWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // "write /dev/stdout: ..." says less than what follows
		}
		err = fmt.Errorf("write standard output: %w", err)
	}
	c.err = err
	return n, err
}

func usage(w io.Writer) {
	names := make([]string, 0, len(commands))
	width := 0
	for n := range commands {
		names = append(names, n)
		width = max(width, len(n))
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("kvsim: a deterministic simulator of an LLM server's hierarchical KV cache\n\n")
	b.WriteString("usage: kvsim <command> [flags]\n\ncommands:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, n, commands[n].summary)
	}
	b.WriteString("\nRun 'kvsim <command> -h' for the flags of one command.\n")
	io.WriteString(w, b.String())
}

// durationFlag is a time.Duration flag whose parse error says what is
// expected (the flag package's says only "parse error").
type durationFlag struct{ d *time.Duration }

func (f durationFlag) String() string {
	if f.d == nil {
		return "0s"
	}
	return f.d.String()
}

func (f durationFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("expected a duration with its unit, such as 300s, 5m or 1h30m, found %q", s)
	}
	*f.d = d
	return nil
}

// durationVar defines a duration flag with a helpful parse error.
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var(durationFlag{p}, name, usage)
}
