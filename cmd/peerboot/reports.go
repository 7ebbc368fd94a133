package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/bootproto"
	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/output"
	"github.com/peerboot/peerboot/reportdisk"
	"github.com/peerboot/peerboot/selftest"
)

// reportsJSON is `peerboot report list --json`: every report file found, oldest
// first (Error set for a file that is not a readable report), and the newest verdict.
type reportsJSON struct {
	Source  string            `json:"source"`
	Reports []reportEntryJSON `json:"reports"`
	Newest  string            `json:"newest_verdict"` // "" when there is none
}

type reportEntryJSON struct {
	Path      string `json:"path"`
	Size      int64  `json:"size"`
	Verdict   string `json:"verdict,omitempty"`
	StartedAt string `json:"started_at,omitempty"`
	Recipe    string `json:"recipe,omitempty"`
	Kernel    string `json:"kernel,omitempty"`
	Error     string `json:"error,omitempty"`
}

// reportsCmd is `peerboot reports`, kept as the short name of `report list`.
func reportsCmd() *cobra.Command {
	c := reportListCmd()
	c.Use = "reports " + strings.TrimPrefix(c.Use, "list ")
	c.Short += " (= report list)"
	return c
}

func reportListCmd() *cobra.Command {
	var save string
	var brief, asJSON bool
	cmd := &cobra.Command{
		Use:   "list DEVICE|IMAGE|OUTDIR [--save DIR] [--brief] [--json]",
		Short: "List and show the self-test reports on a stick or disk image",
		Long: `list (also ` + "`peerboot reports`" + `) reads the PEERBOOT partition of a flashed stick (or a
disk image, a build output directory holding disk.img as flash takes it, or a FAT
volume labelled PEERBOOT without a partition table) and lists the self-test
reports the boots left there (*.json in its root and in reports/), oldest first,
then renders each one in full (--brief: the list only). --save DIR copies the
JSON files out. It only reads the device, so a mounted stick is fine.

Exit codes: 0 when the newest report's verdict is pass; 9 (selftest) when it is
not, or no report is there; 10 (device) when the device holds no readable
PEERBOOT partition; 2 bad command line. --json prints the list as JSON.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src := args[0]
			if st, err := os.Stat(src); errors.Is(err, fs.ErrNotExist) {
				return exitcode.Tag(exitcode.Usage, fmt.Errorf("%s: no such file or device", src))
			} else if err != nil {
				return exitcode.Tag(exitcode.Usage, err)
			} else if st.IsDir() {
				src = filepath.Join(src, output.DiskFile)
				if _, err := os.Stat(src); err != nil {
					return exitcode.Tag(exitcode.Usage, fmt.Errorf("%s: no %s: not a build output (peerboot build writes out/RECIPE)", args[0], output.DiskFile))
				}
			}
			found, err := reportdisk.Read(src)
			if err != nil {
				return exitcode.Tag(exitcode.Device, err)
			}
			w := cmd.OutOrStdout()
			if asJSON {
				j := reportsJSON{Source: src, Reports: []reportEntryJSON{}}
				for _, f := range found {
					e := reportEntryJSON{Path: f.Path, Size: f.Size}
					if f.Err != nil {
						e.Error = f.Err.Error()
					} else {
						e.Verdict, e.StartedAt, e.Recipe, e.Kernel = string(f.Report.Verdict), f.Report.StartedAt, f.Report.Recipe.Name, f.Report.Kernel.Release
					}
					j.Reports = append(j.Reports, e)
				}
				if n := len(found); n > 0 && found[n-1].Report != nil {
					j.Newest = string(found[n-1].Report.Verdict)
				}
				if err := writeJSON(w, j); err != nil {
					return err
				}
				brief = true // the JSON is the whole output
				w = io.Discard
			}
			if len(found) == 0 {
				return exitcode.Tag(exitcode.Selftest, fmt.Errorf("%s: no reports on the %s partition (has the stick been booted?)", src, bootproto.ReportsLabel))
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
				saved := 0
				for _, f := range found {
					if f.Raw == nil {
						continue
					}
					name, err := saveReport(save, path.Base(f.Path), f.Raw)
					if err != nil {
						return fmt.Errorf("saving %s: %w", f.Path, err)
					}
					if name != path.Base(f.Path) {
						fmt.Fprintf(w, "saved %s as %s: %s holds another report of that name\n", f.Path, name, save)
					}
					saved++
				}
				fmt.Fprintf(w, "saved %d file(s) to %s\n", saved, save)
			}
			if !brief {
				for _, f := range found {
					if f.Report != nil {
						fmt.Fprintf(w, "\n== %s\n%s", f.Path, selftest.RenderWidth(f.Report, consoleWidth(w, 0, os.Getenv)))
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
	addJSONFlag(cmd, &asJSON)
	return cmd
}

// saveReport writes a report into dir under name, or NAME-N.json when dir
// holds a different file of that name (a report from another stick whose
// clock said the same second): a saved report is never replaced. A file
// with the same bytes is this report saved before. It returns the name used.
func saveReport(dir, name string, raw []byte) (string, error) {
	ext := path.Ext(name)
	base := strings.TrimSuffix(name, ext)
	for i := 0; i < 1000; i++ {
		n := name
		if i > 0 {
			n = fmt.Sprintf("%s-%d%s", base, i, ext)
		}
		p := filepath.Join(dir, n)
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, raw) {
				return n, nil
			}
			continue
		}
		if err != nil {
			return "", err
		}
		if _, err := f.Write(raw); err != nil {
			f.Close()
			os.Remove(p)
			return "", err
		}
		return n, f.Close()
	}
	return "", fmt.Errorf("%s holds 1000 other reports named %s*", dir, base)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
