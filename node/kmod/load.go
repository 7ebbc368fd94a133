package kmod

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/selftest"
)

// Loader inserts one module file with a parameter string.
type Loader interface {
	Load(path, params string) error
}

// KernelLog yields the kernel messages logged since the previous call.
type KernelLog interface {
	Drain() []string
}

// Finit is the real loader: finit_module(2) on the open file, so the kernel reads
// (and, with MODULE_SIG, checks) the bytes itself.
type Finit struct{}

func (Finit) Load(path, params string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	flags := 0
	if Compressed(path) {
		flags |= unix.MODULE_INIT_COMPRESSED_FILE // needs CONFIG_MODULE_DECOMPRESS
	}
	if err := unix.FinitModule(int(f.Fd()), params, flags); err != nil {
		return fmt.Errorf("finit_module %s: %w", path, err)
	}
	return nil
}

// run loads the requested modules in order and records every attempt.
type run struct {
	ix     *Index
	loader Loader
	klog   KernelLog
	out    []selftest.Module
	state  map[string]string // module name -> result of its attempt
}

// Load loads each module after its dependencies and returns one record per attempt,
// dependencies included. A module whose dependency did not load is skipped, not
// attempted: its own error would only repeat the dependency's. The nvidia-* modules
// are taken to need nvidia even when neither modules.dep nor .modinfo says so (a
// compressed out-of-tree module).
func Load(ix *Index, loader Loader, klog KernelLog, modules []string, params map[string]map[string]string) []selftest.Module {
	r := &run{ix: ix, loader: loader, klog: klog, out: []selftest.Module{}, state: map[string]string{}}
	for _, m := range modules {
		name := Name(m)
		order := ix.LoadOrder(name)
		if name != "nvidia" && strings.HasPrefix(name, "nvidia_") && !slices.Contains(order, "nvidia") {
			order = append([]string{"nvidia"}, order...)
		}
		// A dependency that already failed rules the module out before anything more
		// is inserted for it; otherwise dependencies load in order until one fails.
		failed := ""
		for _, dep := range order[:len(order)-1] {
			if res, ok := r.state[dep]; ok && res != selftest.ModLoaded {
				failed = dep
				break
			}
		}
		for _, dep := range order[:len(order)-1] {
			if failed != "" {
				break
			}
			if res := r.ensure(dep, m); res != selftest.ModLoaded {
				failed = dep
			}
		}
		if failed != "" {
			r.record(selftest.Module{Name: m, Params: ParamString(params[m]), Result: selftest.ModSkipped,
				Error: fmt.Sprintf("%s not loaded", displayName(failed, modules)), KernelLog: []string{}})
			r.state[name] = selftest.ModSkipped
			continue
		}
		r.state[name] = r.attempt(m, name, ParamString(params[m]), "")
	}
	return r.out
}

// ensure loads a dependency once and returns its result.
func (r *run) ensure(name, requiredBy string) string {
	if res, ok := r.state[name]; ok {
		return res
	}
	if r.ix.builtin[name] {
		r.state[name] = selftest.ModLoaded
		return selftest.ModLoaded
	}
	res := r.attempt(name, name, "", requiredBy)
	r.state[name] = res
	return res
}

// attempt inserts one module and records the result with the kernel's messages.
func (r *run) attempt(display, name, params, requiredBy string) string {
	m := selftest.Module{Name: display, RequiredBy: requiredBy, Params: params}
	rel, ok := r.ix.path[name]
	if !ok {
		m.Result, m.Errno = selftest.ModError, int(unix.ENOENT)
		m.Error = fmt.Sprintf("%s.ko not found under %s", display, r.ix.Dir)
		m.KernelLog = []string{}
		r.record(m)
		return m.Result
	}
	m.File = rel
	r.klog.Drain() // what came before belongs to someone else
	err := r.loader.Load(filepath.Join(r.ix.Dir, rel), params)
	m.KernelLog = r.klog.Drain()
	var errno unix.Errno
	switch {
	case err == nil:
		m.Result = selftest.ModLoaded
	case errors.As(err, &errno) && errno == unix.EEXIST:
		m.Result, m.Error = selftest.ModLoaded, "already loaded"
	case errors.As(err, &errno) && errno == unix.ENODEV:
		m.Result, m.Errno, m.Error = selftest.ModENODEV, int(errno), errno.Error()
	case errors.As(err, &errno):
		m.Result, m.Errno, m.Error = selftest.ModError, int(errno), unix.ErrnoName(errno)+": "+errno.Error()
	default:
		m.Result, m.Error = selftest.ModError, err.Error()
	}
	r.record(m)
	return m.Result
}

func (r *run) record(m selftest.Module) { r.out = append(r.out, m) }

// displayName spells a module as the caller did when it is one of the requested.
func displayName(name string, requested []string) string {
	for _, m := range requested {
		if Name(m) == name {
			return m
		}
	}
	return name
}

// ParamString renders parameters as finit_module wants them, sorted for a stable report.
func ParamString(p map[string]string) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + p[k]
	}
	return strings.Join(parts, " ")
}

// Bounded stops waiting for loads at a deadline. finit_module cannot be interrupted:
// a load still running then goes on in the background (a NIC's interface may yet
// appear) and the caller goes on without it; no load starts after the deadline.
type Bounded struct {
	Inner    Loader
	Deadline time.Time
	Limit    time.Duration // for the messages: what the deadline allowed
}

func (b *Bounded) Load(path, params string) error {
	wait := time.Until(b.Deadline)
	if wait <= 0 {
		return fmt.Errorf("not attempted: the %s allowed for network drivers was spent", b.Limit)
	}
	done := make(chan error, 1)
	go func() {
		// A panic here would end PID 1: it becomes the load's error instead.
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("peerboot-init bug: loading %s panicked: %v", filepath.Base(path), p)
			}
		}()
		done <- b.Inner.Load(path, params)
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("still loading after %s; the boot goes on without waiting for it", b.Limit)
	}
}
