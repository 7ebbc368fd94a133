// Package citest holds the checks on the CI workflow (.github/workflows/images.yml):
// it parses as a workflow, its expressions refer to things that exist, and every
// build step it runs is a Makefile target a developer can run the same way.
package citest
