package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"

	"github.com/peerboot/peerboot/recipe"
)

// regenerateDocs is how the generated references are rewritten; the staleness test and
// the files' own header print it.
const regenerateDocs = "make docs"

// manDate is the date in every man page's header. cobra would take the clock (or
// SOURCE_DATE_EPOCH); a fixed date keeps the committed pages reproducible.
var manDate = time.Date(2026, time.December, 1, 0, 0, 0, 0, time.UTC)

// Generated directories and files under the docs root, relative to it.
const (
	cliDocsDir      = "cli"
	manDocsDir      = "man"
	recipeReference = "recipe-reference.md"
)

func docsCmd() *cobra.Command {
	out := "docs"
	cmd := &cobra.Command{
		Use:    "docs [--out DIR]",
		Short:  "Write the generated references: the CLI (markdown and man pages) and the recipe keys",
		Hidden: true,
		Long: `docs writes the references generated from the code under --out (default docs/):
cli/*.md and man/*.1 from the command tree (every command's help and flags), and
recipe-reference.md from the recipe schema (recipe/types.go's field comments and
recipe/defaults.toml). Generated files that no command produces any more are removed.
A test fails while the committed files differ from what this writes: run ` + "`" + regenerateDocs + "`" + `.`,
		Args: maxArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			files, err := generatedDocs()
			if err != nil {
				return err
			}
			if err := writeDocs(out, files); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %d files under %s\n", len(files), out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", out, "docs root to write cli/, man/ and recipe-reference.md under")
	return cmd
}

// generatedDocs renders every generated file, keyed by its path under the docs root.
// It builds a fresh command tree with the help and completion commands cobra adds at
// run time, so the reference shows what the binary offers.
func generatedDocs() (map[string][]byte, error) {
	root := rootCmd()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	root.DisableAutoGenTag = true // no date in the markdown
	machineIndependent(root)
	files := map[string][]byte{}
	var walk func(c *cobra.Command) error
	walk = func(c *cobra.Command) error {
		c.DisableAutoGenTag = true
		var md bytes.Buffer
		if err := doc.GenMarkdownCustom(c, &md, func(s string) string { return s }); err != nil {
			return fmt.Errorf("markdown for %s: %w", c.CommandPath(), err)
		}
		files[filepath.Join(cliDocsDir, strings.ReplaceAll(c.CommandPath(), " ", "_")+".md")] = md.Bytes()
		var man bytes.Buffer
		date := manDate
		header := &doc.GenManHeader{Section: "1", Date: &date, Source: "peerboot", Manual: "peerboot manual"}
		if err := doc.GenMan(c, header, &man); err != nil {
			return fmt.Errorf("man page for %s: %w", c.CommandPath(), err)
		}
		files[filepath.Join(manDocsDir, strings.ReplaceAll(c.CommandPath(), " ", "-")+".1")] = man.Bytes()
		for _, sub := range c.Commands() {
			// cobra's own rule for what its doc tree lists (hidden commands, the help command).
			if !sub.IsAvailableCommand() || sub.IsAdditionalHelpTopicCommand() {
				continue
			}
			if err := walk(sub); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(root); err != nil {
		return nil, err
	}
	ref, err := recipe.ReferenceMarkdown(regenerateDocs)
	if err != nil {
		return nil, err
	}
	files[recipeReference] = ref
	return files, nil
}

// machineIndependent replaces flag defaults taken from this machine (-j's CPU count)
// with words, so the reference is the same wherever it is generated.
func machineIndependent(c *cobra.Command) {
	cpus := strconv.Itoa(runtime.NumCPU())
	visit := func(f *pflag.Flag) {
		if f.Name == "jobs" && f.DefValue == cpus {
			f.DefValue = "the number of CPUs"
		}
	}
	c.Flags().VisitAll(visit)
	c.PersistentFlags().VisitAll(visit)
	for _, sub := range c.Commands() {
		machineIndependent(sub)
	}
}

// writeDocs writes files under dir and removes the generated files of commands that no
// longer exist (any *.md in cli/ or *.1 in man/ not in files).
func writeDocs(dir string, files map[string][]byte) error {
	for _, sub := range []string{cliDocsDir, manDocsDir} {
		entries, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		for _, e := range entries {
			name := filepath.Join(sub, e.Name())
			if _, keep := files[name]; !keep && (strings.HasSuffix(name, ".md") || strings.HasSuffix(name, ".1")) {
				if err := os.Remove(filepath.Join(dir, name)); err != nil {
					return err
				}
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, files[name], 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", p, err)
		}
	}
	return nil
}
