package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/peerboot/peerboot/apt"
	"github.com/peerboot/peerboot/build"
	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/store"
)

const defaultRecipe = "recipes/default.toml"

func recipeArg(args []string) string {
	if len(args) == 0 {
		return defaultRecipe
	}
	return args[0]
}

// recipeDirs are where a recipe given by name (`peerboot plan xeon-8gpu`) is
// looked for: each directory of $PEERBOOT_RECIPES (a list, as PATH), then
// ./recipes (the repository root's).
func recipeDirs() []string {
	var dirs []string
	seen := map[string]bool{}
	for _, d := range append(filepath.SplitList(os.Getenv("PEERBOOT_RECIPES")), "recipes") {
		abs, err := filepath.Abs(d)
		if d == "" || err != nil || seen[abs] {
			continue // the same directory twice would list its recipes twice
		}
		seen[abs] = true
		dirs = append(dirs, d)
	}
	return dirs
}

// resolveRecipe turns a command's recipe argument into a file: a path as it is,
// a name through recipeDirs. The default recipe, absent from the current
// directory, is looked for by name too, so $PEERBOOT_RECIPES serves it.
func resolveRecipe(arg string) (string, error) {
	if arg == defaultRecipe {
		if _, err := os.Stat(arg); err != nil {
			arg = "default"
		}
	}
	p, err := recipe.Find(arg, recipeDirs())
	if err != nil {
		return "", exitcode.Tag(exitcode.Recipe, err)
	}
	return p, nil
}

func loadRecipe(arg string) (*recipe.Resolved, error) {
	path, err := resolveRecipe(arg)
	if err != nil {
		return nil, err
	}
	r, err := recipe.Load(path)
	if err != nil {
		return nil, exitcode.Tag(exitcode.Recipe, err)
	}
	printWarnings(r)
	return r, nil
}

// printWarnings writes the recipe's warnings (an include's item dropped by a
// replaced list) to standard error, file:line first as errors are.
func printWarnings(r *recipe.Resolved) {
	for _, w := range r.Warnings {
		fmt.Fprintln(os.Stderr, w)
	}
}

// validRecipe loads a recipe and reads every data file it names: the one
// validation lock, plan, fetch and build share.
//
// Every problem comes in one run: the recipe's types, keys and values, and the
// data files of what could be read (a missing patch beside a wrong type).
func validRecipe(arg string) (*recipe.Resolved, error) {
	d, err := validData(arg)
	if err != nil {
		return nil, err
	}
	return d.Recipe, nil
}

// validData is validRecipe keeping the data files it read, for the plan: a
// command that plans reads each data file once.
func validData(arg string) (*build.Data, error) {
	path, err := resolveRecipe(arg)
	if err != nil {
		return nil, err
	}
	r, err := recipe.LoadAll(path)
	var errs recipe.Errors
	if err != nil && !errors.As(err, &errs) {
		return nil, exitcode.Tag(exitcode.Recipe, err) // not readable at all
	}
	var d *build.Data
	if r != nil {
		var derr error
		if d, derr = readData(r, err != nil); derr != nil {
			var des recipe.Errors
			if !errors.As(derr, &des) {
				if len(errs) == 0 {
					return nil, derr
				}
			}
			errs = append(errs, des...)
		}
	}
	if len(errs) > 0 {
		return nil, exitcode.Tag(exitcode.Recipe, recipe.Merge(errs))
	}
	printWarnings(r)
	return d, nil
}

// readData runs build.ReadData; on a recipe merged from what was valid of a
// bad file (partial), a stage's data reader that trips over a value validation
// already refused adds nothing rather than crash the report of the rest.
func readData(r *recipe.Resolved, partial bool) (d *build.Data, err error) {
	if partial {
		defer func() {
			if recover() != nil {
				d, err = nil, nil
			}
		}()
	}
	return build.ReadData(r, imageTools())
}

func (g *globals) openStore() (*store.Store, error) {
	root := g.cache
	if root == "" {
		root = store.DefaultRoot()
	}
	return store.Open(root)
}

func httpClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		ResponseHeaderTimeout: 60 * time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   8,
	}}
}

// recipeInputs loads a recipe with its data files, its pinned inputs and the
// store: what most commands start with.
func (g *globals) recipeInputs(path string, requireLock bool) (*build.Data, []lock.Input, []lock.Unresolved, *store.Store, error) {
	d, err := validData(path)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	ins, un, err := g.pinnedInputs(d.Recipe, requireLock)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	st, err := g.openStore()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	d.StatCache = st.HintPath(store.StatCacheHint)
	return d, ins, un, st, nil
}

// pinnedInputs reads the recipe's lock (if any) and lists its inputs with download URLs.
func (g *globals) pinnedInputs(r *recipe.Resolved, requireLock bool) ([]lock.Input, []lock.Unresolved, error) {
	f, lockErr, err := readLock(r)
	if err != nil {
		return nil, nil, err
	}
	if lockErr != nil && requireLock {
		return nil, nil, lockErr
	}
	baseURL := func(name string) (string, error) {
		for _, rr := range r.Repos {
			if rr.Name == name {
				repo, err := lock.AptRepo(rr, g.aptDir)
				return repo.BaseURL, err
			}
		}
		return "", exitcode.Tag(exitcode.Stale, fmt.Errorf("lock names repository %q, which the recipe no longer has: run `peerboot lock %s`", name, r.Path))
	}
	return lock.Inputs(r, f, baseURL)
}

// readLock reads the recipe's lock file. lockErr (exit 4) says it is missing
// though the recipe needs one, or out of date with the recipe; f is then nil.
// err is a lock file that cannot be read or parsed (exit 3).
func readLock(r *recipe.Resolved) (f *lock.File, lockErr, err error) {
	f, err = lock.Read(lock.PathFor(r.Path))
	switch {
	case errors.Is(err, lock.ErrMissing):
		if needsLock(r) {
			return nil, exitcode.Tag(exitcode.Stale, err), nil
		}
		return nil, nil, nil
	case err != nil:
		return nil, nil, exitcode.Tag(exitcode.Recipe, err)
	}
	if err := lock.Check(r, f); err != nil {
		return nil, exitcode.Tag(exitcode.Stale, err), nil
	}
	return f, nil, nil
}

func needsLock(r *recipe.Resolved) bool {
	return r.Kernel.Source.Deb != "" || r.Driver.Source.Deb != "" || r.Outputs.EFIStub.Deb != "" || len(r.Userspace.Packages) > 0 || r.Userspace.Installer.URL != ""
}

func aptClient(st *store.Store) *apt.Client {
	return &apt.Client{HTTP: httpClient(), Cache: st}
}

// imageTools locates peerboot-init and p2pcheck beside this binary
// ($PEERBOOT_TOOLS_DIR overrides, for tests).
func imageTools() build.Tools {
	if d := os.Getenv("PEERBOOT_TOOLS_DIR"); d != "" {
		return build.ToolsBeside(filepath.Join(d, "peerboot"))
	}
	exe, err := os.Executable()
	if err != nil {
		return build.Tools{}
	}
	return build.ToolsBeside(exe)
}
