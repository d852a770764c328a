package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// cmdFlags is one subcommand's flag set. Its name ("kvsim sim") prefixes
// every usage error; its usage text goes before the flags' defaults.
// Every subcommand parses the same way: -h exits 0, a bad flag exits 2
// (exitUsage), and so does every usage error reported with usageErr.
type cmdFlags struct {
	*flag.FlagSet
	usage  string
	stdout io.Writer // nil: -h prints the usage to stderr, as a flag error does
	stderr io.Writer
}

// newCommand returns a subcommand whose usage text and flags are printed
// to stderr on -h and on a flag error. usage is written as is: it ends
// with the line that introduces the flags.
func newCommand(name, usage string, stderr io.Writer) *cmdFlags {
	c := &cmdFlags{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), usage: usage, stderr: stderr}
	c.SetOutput(stderr)
	c.Usage = func() { io.WriteString(stderr, c.usage); c.PrintDefaults() }
	return c
}

// newHintCommand returns a subcommand that prints its usage to stdout on
// -h and only a hint to run -h on a flag error (plan, plan-bench).
func newHintCommand(name, usage string, stdout, stderr io.Writer) *cmdFlags {
	c := newCommand(name, usage, stderr)
	c.stdout = stdout
	c.Usage = func() {}
	return c
}

// parse parses args, which must hold flags only. When ok is false the
// caller returns code: exitOK for -h, exitUsage otherwise (the problem
// has been printed).
func (c *cmdFlags) parse(args []string) (code int, ok bool) {
	if err := c.Parse(args); err != nil {
		return c.parseFailed(err), false
	}
	if c.NArg() > 0 {
		return c.usageErr("unexpected argument %q", c.Arg(0)), false
	}
	return exitOK, true
}

// parsePositional parses flags that may come before or after the
// positional arguments, and returns the positional arguments; code and ok
// are as for parse.
func (c *cmdFlags) parsePositional(args []string) (pos []string, code int, ok bool) {
	pos, err := parseInterleaved(c.FlagSet, args)
	if err != nil {
		return nil, c.parseFailed(err), false
	}
	return pos, exitOK, true
}

func (c *cmdFlags) parseFailed(err error) int {
	if !errors.Is(err, flag.ErrHelp) {
		if c.stdout != nil {
			fmt.Fprintf(c.stderr, "run '%s -h' for usage\n", c.Name())
		}
		return exitUsage
	}
	if c.stdout != nil {
		io.WriteString(c.stdout, c.usage)
		c.SetOutput(c.stdout)
		c.PrintDefaults()
	}
	return exitOK
}

// usageErr prints "NAME: problem" to stderr and returns exitUsage.
func (c *cmdFlags) usageErr(format string, a ...any) int {
	fmt.Fprintf(c.stderr, "%s: %s\n", c.Name(), fmt.Sprintf(format, a...))
	return exitUsage
}

// parseInterleaved parses flags that may come before or after the
// positional arguments, and returns the positional arguments.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
