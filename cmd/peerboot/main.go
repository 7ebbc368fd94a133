// Command peerboot builds reproducible boot images for consumer-GPU P2P nodes.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/exitcode"
)

// version is set at link time (-X main.version=...).
var version = "dev"

// globals are the flags every command shares.
type globals struct {
	cache  string
	aptDir string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	g := &globals{}
	root := &cobra.Command{
		Use:           "peerboot",
		Short:         "Build reproducible boot images for consumer-GPU P2P nodes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.cache, "cache", "", "store directory (default $PEERBOOT_CACHE or ~/.cache/peerboot)")
	root.PersistentFlags().StringVar(&g.aptDir, "apt-dir", "/etc/apt", "apt configuration whose sources give mirror = \"system\"")
	root.AddCommand(versionCmd(), lockCmd(g), buildCmd(g), runCmd(g), fetchCmd(g), planCmd(g), storeCmd(g), doctorCmd(), recipeCmd(), exitCodesCmd(), keysCmd(), signCmd(), verifyCmd(), flashCmd(), reportsCmd(), publishCmd(), pullCmd(), reportCmd(), serveCmd())
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return exitcode.Tag(exitcode.Usage, err) })
	err := root.ExecuteContext(ctx)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(os.Stderr, "peerboot: interrupted")
		} else {
			fmt.Fprintln(os.Stderr, "peerboot:", err)
		}
	}
	os.Exit(exitcode.Of(err))
}
