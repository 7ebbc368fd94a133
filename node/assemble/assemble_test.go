package assemble

import (
	"testing"
	"time"

	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/selftest"
)

func TestBase(t *testing.T) {
	start := time.Date(2025, 6, 1, 14, 0, 0, 0, time.FixedZone("CEST", 2*3600))
	k := selftest.Kernel{Release: "6.1.0-test"}
	r := Base(start, k, nil)
	if r.StartedAt != "2025-06-01T12:00:00Z" || r.Kernel != k || r.Recipe != (selftest.RecipeRef{}) {
		t.Errorf("without a recipe: %+v", r)
	}
	rc, err := recipe.Load("../../recipes/default.toml")
	if err != nil {
		t.Fatal(err)
	}
	r = Base(start, k, rc)
	if want := (selftest.RecipeRef{Name: "default", Digest: rc.Digest, DriverVersion: rc.Recipe.Driver.Version}); r.Recipe != want || want.DriverVersion == "" {
		t.Errorf("recipe %+v, want %+v", r.Recipe, want)
	}
}
