package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/flash"
	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/selftest"
)

func reportsCmd() *cobra.Command {
	var save string
	var brief bool
	cmd := &cobra.Command{
		Use:   "reports DEVICE|IMAGE [--save DIR] [--brief]",
		Short: "List and show the self-test reports on a stick or disk image",
		Long: `reports reads the PEERBOOT partition of a flashed stick (or a disk image, or a
FAT volume labelled PEERBOOT without a partition table) and lists the self-test
reports the boots left there (*.json in its root and in reports/), oldest first,
then renders each one in full (--brief: the list only). --save DIR copies the
JSON files out. It only reads the device, so a mounted stick is fine.

Exit codes: 0 when the newest report's verdict is pass; 9 (selftest) when it is
not, or no report is there; 10 (device) when the device holds no readable
PEERBOOT partition; 2 bad command line.`,
		Args: nArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := os.Stat(args[0]); err != nil {
				return exitcode.Tag(exitcode.Usage, err)
			}
			found, err := flash.ReadReports(args[0])
			if err != nil {
				return exitcode.Tag(exitcode.Device, err)
			}
			w := cmd.OutOrStdout()
			if len(found) == 0 {
				return exitcode.Tag(exitcode.Selftest, fmt.Errorf("%s: no reports on the %s partition (has the stick been booted?)", args[0], image.ReportsLabel))
			}
			for _, f := range found {
				if f.Err != nil {
					fmt.Fprintf(w, "%-40s %8d B  unreadable: %v\n", f.Path, f.Size, f.Err)
					continue
				}
				r := f.Report
				fmt.Fprintf(w, "%-40s %8d B  %-4s  started %s  recipe %s  kernel %s\n", f.Path, f.Size,
					strings.ToUpper(r.Verdict), orDash(r.StartedAt), orDash(r.Recipe.Name), orDash(r.Kernel.Release))
			}
			if save != "" {
				if err := os.MkdirAll(save, 0o755); err != nil {
					return err
				}
				for _, f := range found {
					if f.Raw == nil {
						continue
					}
					if err := os.WriteFile(filepath.Join(save, path.Base(f.Path)), f.Raw, 0o644); err != nil {
						return fmt.Errorf("saving %s: %w", f.Path, err)
					}
				}
				fmt.Fprintf(w, "saved %d file(s) to %s\n", len(found), save)
			}
			if !brief {
				for _, f := range found {
					if f.Report != nil {
						fmt.Fprintf(w, "\n== %s\n%s", f.Path, selftest.Render(f.Report))
					}
				}
			}
			last := found[len(found)-1]
			if last.Report == nil || last.Report.Verdict != selftest.Pass {
				return exitcode.Tag(exitcode.Selftest, fmt.Errorf("the newest report, %s, is not a pass", last.Path))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&save, "save", "", "copy the JSON reports into this directory")
	cmd.Flags().BoolVar(&brief, "brief", false, "list the reports without their summaries")
	return cmd
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
