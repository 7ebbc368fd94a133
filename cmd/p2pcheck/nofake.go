//go:build !gpufake

package main

import "fmt"

// hasFake says this binary carries the FAKE backend.
const hasFake = false

// loadFake refuses --fake: this p2pcheck was built without the FAKE backend (the
// image's never has it; the tests build theirs with -tags gpufake, see fake.go).
func loadFake(path string) (backend, error) {
	return nil, fmt.Errorf("--fake %s: this p2pcheck has no FAKE backend (it is built into test binaries only: go build -tags gpufake ./cmd/p2pcheck)", path)
}
