package main

import "testing"

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
