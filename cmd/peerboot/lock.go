package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/apt"
	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/recipe"
)

// lockJSON is `peerboot lock --json`. State: "written", "unchanged", or with
// --check "up-to-date" or "differs" (Diff holds the line diff; exit 4).
type lockJSON struct {
	Path     string    `json:"path"`
	Recipe   string    `json:"recipe"`
	State    string    `json:"state"`
	Packages int       `json:"packages"`
	Bytes    int64     `json:"bytes"`
	Debs     []debJSON `json:"debs"`
	Diff     string    `json:"diff,omitempty"`
}

type debJSON struct {
	Package      string `json:"package"`
	Version      string `json:"version"`
	Architecture string `json:"architecture"`
	Role         string `json:"role"`
	Repo         string `json:"repo"`
	SHA256       string `json:"sha256"`
	Size         int64  `json:"size"`
}

func lockCmd(g *globals) *cobra.Command {
	var check, upgrade, asJSON bool
	cmd := &cobra.Command{
		Use:   "lock [RECIPE]",
		Short: "Resolve the recipe's Debian packages into pins (RECIPE.lock)",
		Long: `lock downloads each repository's InRelease, verifies its OpenPGP signature against
the recipe's keyring, checks the Packages indexes against InRelease's hashes, and pins
every package the recipe needs (sources, EFI stub, and the userspace closure) into the
lock file beside the recipe. With --check it writes nothing and, if the lock file
differs from a fresh resolve, prints the difference and fails (exit 4). --json prints
the result and every pin as JSON (docs/commands.md, "Machine-readable output").

A package the recipe asks for by version range ("libnccl2 >= 2.25.1") takes the newest
version meeting it, except that a lock file already there keeps its pin while that pin
still meets the range and the archive still carries it (as apt keeps an installed
package); lock names each pin it kept. --upgrade takes the newest instead.`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := validRecipe(recipeArg(args))
			if err != nil {
				return err
			}
			if err := checkKeyrings(r); err != nil {
				return err
			}
			st, err := g.openStore()
			if err != nil {
				return err
			}
			path := lock.PathFor(r.Path)
			old, _ := os.ReadFile(path)
			prev, prevErr := lock.Read(path)
			rs := &lock.Resolver{Client: aptClient(st), AptDir: g.aptDir,
				Log: func(f string, a ...any) { fmt.Fprintf(cmd.ErrOrStderr(), f+"\n", a...) }}
			if prevErr == nil && !upgrade {
				rs.Keep = prev
			}
			f, err := rs.Resolve(cmd.Context(), r)
			if err != nil {
				return exitcode.Tag(lockErrorClass(err), err)
			}
			if prevErr == nil {
				lock.KeepIndexes(f, prev) // pins unchanged: they still come from the indexes it names
			}
			j := lockJSON{Path: path, Recipe: r.Path, Packages: len(f.Debs), Debs: []debJSON{}}
			for _, d := range f.Debs {
				j.Bytes += d.Size
				j.Debs = append(j.Debs, debJSON{Package: d.Package, Version: d.Version, Architecture: d.Architecture, Role: d.Role, Repo: d.Repo, SHA256: d.SHA256, Size: d.Size})
			}
			w := cmd.OutOrStdout()
			changed := !bytes.Equal(old, f.Encode())
			switch {
			case check && changed:
				j.State, j.Diff = "differs", lineDiff(string(old), string(f.Encode()))
				err = exitcode.Tag(exitcode.Stale, fmt.Errorf("%s differs from a fresh resolve (diff above): run `peerboot lock %s`", path, r.Path))
			case check:
				j.State = "up-to-date"
			case changed:
				if err := lock.Write(path, f); err != nil {
					return err
				}
				j.State = "written"
			default:
				j.State = "unchanged"
			}
			if asJSON {
				if werr := writeJSON(w, j); werr != nil {
					return werr
				}
				return err
			}
			switch j.State {
			case "differs":
				fmt.Fprintf(w, "--- %s (committed)\n+++ fresh resolve\n%s", path, j.Diff)
			case "up-to-date":
				fmt.Fprintf(w, "%s is up to date (%d packages)\n", path, j.Packages)
			default:
				fmt.Fprintf(w, "%s %s: %d packages, %.1f MiB\n", path, j.State, j.Packages, float64(j.Bytes)/(1<<20))
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&check, "check", false, "fail if the lock file differs from a fresh resolve; write nothing")
	cmd.Flags().BoolVar(&upgrade, "upgrade", false, "take the newest version meeting each version-range request, not the lock's pin")
	addJSONFlag(cmd, &asJSON)
	return cmd
}

// checkKeyrings names, at its line, every repository keyring that cannot be read
// (exit 3): a path in the recipe, not a network failure.
func checkKeyrings(r *recipe.Resolved) error {
	var errs recipe.Errors
	for i, rr := range r.Repos {
		f, err := os.Open(rr.Keyring)
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			errs = append(errs, r.ErrorAt(fmt.Sprintf("repo[%d].keyring", i), "cannot read %s: %v", rr.Keyring, err))
			continue
		}
		f.Close()
	}
	if len(errs) > 0 {
		return exitcode.Tag(exitcode.Recipe, errs)
	}
	return nil
}

// lockErrorClass tells the recipe's mistakes (a keyring it names that cannot be
// read, a package or version the archive lacks: 3) and tampering (a signature or
// index hash that does not verify: 6) from the network (5).
func lockErrorClass(err error) exitcode.Class {
	var pe *lock.PinError
	switch {
	case errors.As(err, &pe):
		return exitcode.Recipe
	case apt.KindOf(err) == apt.KindKeyring:
		return exitcode.Recipe
	case apt.KindOf(err) == apt.KindIntegrity:
		return exitcode.Integrity
	}
	return exitcode.Network
}

// lineDiff returns the lines only in a ("-") or only in b ("+"), each run of
// changes headed by its line numbers, from a longest common subsequence.
func lineDiff(a, b string) string {
	x, y := strings.SplitAfter(a, "\n"), strings.SplitAfter(b, "\n")
	n, m := len(x), len(y)
	// lcs[i][j] is the LCS length of x[i:] and y[j:].
	lcs := make([][]int32, n+1)
	for i := range lcs {
		lcs[i] = make([]int32, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out strings.Builder
	inRun := false
	line := func(prefix, s string, i, j int) {
		if !inRun {
			fmt.Fprintf(&out, "@@ -%d +%d @@\n", i+1, j+1)
			inRun = true
		}
		out.WriteString(prefix + strings.TrimSuffix(s, "\n") + "\n")
	}
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && x[i] == y[j]:
			inRun = false
			i++
			j++
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
			line("-", x[i], i, j)
			i++
		default:
			line("+", y[j], i, j)
			j++
		}
	}
	return out.String()
}
