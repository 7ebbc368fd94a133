// Package exitcode tags errors with a class that maps to a stable process exit code,
// so scripts and CI can tell "your recipe is wrong" from "the network is down".
package exitcode

import "errors"

// Class is an error class. Its numeric value is the exit code and must never change.
type Class int

const (
	OK        Class = 0
	Internal  Class = 1  // a bug or an unclassified failure
	Usage     Class = 2  // bad command line
	Recipe    Class = 3  // recipe or lock file invalid
	Stale     Class = 4  // lock missing or out of date with the recipe, or an input not fetched
	Network   Class = 5  // a download or repository could not be reached
	Integrity Class = 6  // hash or signature mismatch
	HostTools Class = 7  // a required host tool is missing
	Build     Class = 8  // a stage failed (compile, patch, image)
	Selftest  Class = 9  // the self-test ran and its verdict is FAIL
	Device    Class = 10 // a target device was refused or could not be read or written

	// Interrupted is Ctrl-C (SIGINT), the shell's 128 + 2; main exits 128 + the
	// signal's number (143 for SIGTERM). No error is tagged with it.
	Interrupted Class = 130
)

// Names lists the classes for documentation (docs/commands.md, `peerboot exit-codes`).
var Names = []struct {
	Class Class
	Name  string
	Means string
}{
	{OK, "ok", "success"},
	{Internal, "internal", "unexpected failure (a bug: please report it)"},
	{Usage, "usage", "bad command line"},
	{Recipe, "recipe", "recipe or lock file is invalid"},
	{Stale, "stale", "lock file missing or out of date, or a pinned input not fetched yet: run the command the message names (`peerboot lock RECIPE` or `peerboot fetch RECIPE`)"},
	{Network, "network", "a repository or download could not be reached"},
	{Integrity, "integrity", "a hash or signature did not match"},
	{HostTools, "host-tools", "a required host tool is missing: run `peerboot doctor`"},
	{Build, "build", "a build stage failed"},
	{Selftest, "selftest", "the self-test verdict is FAIL"},
	{Device, "device", "the target device was refused (mounted, system disk, partition, too small, not removable without --force, not confirmed) or could not be read or written"},
	{Interrupted, "interrupted", "Ctrl-C (128 + the signal's number: 130 for SIGINT, 143 for SIGTERM)"},
}

type tagged struct {
	class Class
	err   error
}

func (t *tagged) Error() string { return t.err.Error() }
func (t *tagged) Unwrap() error { return t.err }

// Tag marks err with class; the outermost tag wins when errors are wrapped again.
func Tag(c Class, err error) error {
	if err == nil {
		return nil
	}
	return &tagged{class: c, err: err}
}

// Of returns the exit code for err: 0 for nil, the class of the outermost tag, else Internal.
func Of(err error) int {
	if err == nil {
		return int(OK)
	}
	var t *tagged
	if errors.As(err, &t) {
		return int(t.class)
	}
	return int(Internal)
}
