package main

import (
	"path/filepath"
	"testing"
)

func TestDriverFlavour(t *testing.T) {
	cases := []struct {
		files   []string
		version string
		deb     bool
		want    string
	}{
		{[]string{"(defaults)", "recipes/drivers/550.163.01-p2p.toml", "recipes/xeon-8gpu.toml"}, "550.163.01", false, "550.163.01-p2p"},
		{[]string{"(defaults)", "recipes/default.toml"}, "535.261.03", true, "535.261.03-debian"},
		{[]string{"(defaults)", "recipes/x.toml"}, "560.1", false, "560.1"},
	}
	for _, c := range cases {
		if got := driverFlavour(c.files, c.version, c.deb); got != c.want {
			t.Errorf("driverFlavour(%v) = %q, want %q", c.files, got, c.want)
		}
	}
}

// Every driver flavour in recipes/drivers/ is picked by a platform recipe, so the
// workflow (which builds the matrix) builds, reproduces and publishes each one.
func TestEveryDriverFlavourIsInTheMatrix(t *testing.T) {
	paths, _ := filepath.Glob("../../recipes/*.toml")
	m, err := buildMatrix(paths)
	if err != nil {
		t.Fatal(err)
	}
	missing, err := unbuiltFlavours("../../recipes/drivers", m)
	if err != nil || len(missing) > 0 {
		t.Fatalf("flavours no recipe builds: %v (%v)", missing, err)
	}
	if m, _ := unbuiltFlavours("../../recipes/drivers", m[:0]); len(m) < 2 {
		t.Fatalf("the check sees only %v in recipes/drivers", m)
	}
}
