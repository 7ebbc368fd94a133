// Command peerboot builds reproducible boot images for consumer-GPU P2P nodes.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/internal/didyoumean"
	"github.com/peerboot/peerboot/recipe"
)

// version is set at link time (-X main.version=...).
var version = "dev"

// globals are the flags every command shares.
type globals struct {
	cache  string
	aptDir string
}

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	var caught os.Signal
	go func() {
		caught = <-sigs
		cancel()
		signal.Stop(sigs) // a second Ctrl-C kills at once
	}()
	root := rootCmd()
	stdout := &countingWriter{w: os.Stdout}
	root.SetOut(stdout)
	cmd, err := root.ExecuteContextC(ctx)
	code := exitcode.Of(err)
	if err != nil && ctx.Err() != nil {
		// Interrupted: the shell's convention, 128 + the signal's number.
		code = int(exitcode.Interrupted)
		if s, ok := caught.(syscall.Signal); ok {
			code = 128 + int(s)
		}
		fmt.Fprintln(os.Stderr, "peerboot: interrupted")
	} else if err != nil {
		printError(os.Stderr, err)
	}
	// Under --json, a command that failed before printing its document prints
	// the error as one, so a script reading stdout always gets JSON.
	if err != nil && stdout.n == 0 && jsonRequested(cmd) {
		writeJSON(os.Stdout, errorDocument(err, code))
	}
	os.Exit(code)
}

func rootCmd() *cobra.Command {
	g := &globals{}
	var showVersion bool
	root := &cobra.Command{
		Use:           "peerboot",
		Short:         "Build reproducible boot images for consumer-GPU P2P nodes",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          unknownCommand,
		// Runs before every command's own checks: a flag value out of range is a
		// usage error whichever command it is given to.
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error { return checkFlagValues(cmd) },
		RunE: func(cmd *cobra.Command, args []string) error {
			if showVersion {
				return printVersion(cmd.OutOrStdout(), false)
			}
			return cmd.Help()
		},
	}
	root.Flags().BoolVar(&showVersion, "version", false, "print the version (the same as the version command)")
	root.PersistentFlags().StringVar(&g.cache, "cache", "", "store directory (default $PEERBOOT_CACHE or ~/.cache/peerboot)")
	root.AddCommand(versionCmd(), lockCmd(g), buildCmd(g), runCmd(g), fetchCmd(g), planCmd(g), storeCmd(g), doctorCmd(g), recipeCmd(), exitCodesCmd(), keysCmd(), signCmd(), verifyCmd(), flashCmd(), reportsCmd(), publishCmd(), pullCmd(), reportCmd(), serveCmd(), rolloutCmd(), docsCmd())
	// --apt-dir only where a recipe's repositories are read: a flag on every
	// command suggests every command reads apt's configuration.
	for _, path := range [][]string{{"lock"}, {"plan"}, {"fetch"}, {"build"}, {"store", "import"}, {"store", "push"}} {
		if c, _, err := root.Find(path); err == nil {
			c.Flags().StringVar(&g.aptDir, "apt-dir", "/etc/apt", "apt configuration whose sources give mirror = \"system\"")
		}
	}
	root.SetFlagErrorFunc(flagError)
	// A command group run with an unknown subcommand is a usage error, not its help.
	for _, c := range root.Commands() {
		if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
			c.Args = unknownCommand
			c.RunE = func(cmd *cobra.Command, args []string) error { return cmd.Help() }
		}
	}
	// help with an unknown topic (peerboot help biuld) is the same usage error as
	// the command itself, not the root's help and exit 0.
	root.InitDefaultHelpCmd()
	if help, _, err := root.Find([]string{"help"}); err == nil {
		help.Args = func(cmd *cobra.Command, args []string) error {
			if c, rest, err := cmd.Root().Find(args); err == nil && len(rest) > 0 && c.HasSubCommands() {
				return unknownCommand(c, rest)
			}
			return nil
		}
	}
	usageArgs(root)
	return root
}

// usageArgs makes every argument-count error a usage error (exit 2), whichever
// cobra.PositionalArgs a command uses.
func usageArgs(c *cobra.Command) {
	if check := c.Args; check != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			err := check(cmd, args)
			if err != nil && exitcode.Of(err) == int(exitcode.Internal) {
				return exitcode.Tag(exitcode.Usage, fmt.Errorf("%s: %w (usage: %s)", commandName(cmd), err, cmd.UseLine()))
			}
			return err
		}
	}
	for _, sub := range c.Commands() {
		usageArgs(sub)
	}
}

// unknownCommand refuses arguments to a command that only has subcommands.
func unknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	if s := didyoumean.Closest(args[0], names); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	return exitcode.Tag(exitcode.Usage, fmt.Errorf("%s; run `%s --help`", msg, cmd.CommandPath()))
}

// flagError makes a flag cobra could not parse a usage error; an unknown flag is
// worded as an unknown command is: the command it was given to, the nearest flag
// that command has, and where to look.
func flagError(c *cobra.Command, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "unknown flag: --"); ok {
		var names []string
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if !f.Hidden {
				names = append(names, f.Name)
			}
		})
		if s := didyoumean.Closest(name, names); s != "" {
			msg += fmt.Sprintf(" (did you mean --%s?)", s)
		}
	} else if !strings.HasPrefix(msg, "unknown shorthand flag: ") {
		return exitcode.Tag(exitcode.Usage, err)
	}
	if c != c.Root() {
		msg = commandName(c) + ": " + msg
	}
	return exitcode.Tag(exitcode.Usage, fmt.Errorf("%s; run `%s --help`", msg, c.CommandPath()))
}

// located matches a message that starts with file:line:, the form editors jump to.
var located = regexp.MustCompile(`^[^\s:]+:\d+:`)

// printError writes err for people: "peerboot: " and the message, except where
// the message already starts with file:line or is a recipe error (every line
// starts with its file, and its line where the key is set),
// which is printed as is so editors can jump to it.
func printError(w io.Writer, err error) {
	msg := err.Error()
	var re *recipe.Error
	var res recipe.Errors
	if located.MatchString(msg) || errors.As(err, &re) || errors.As(err, &res) {
		fmt.Fprintln(w, msg)
		return
	}
	fmt.Fprintln(w, "peerboot: "+msg)
}

// commandName is a command's path without "peerboot ", for messages that main
// prefixes with "peerboot: " already.
func commandName(cmd *cobra.Command) string {
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}
