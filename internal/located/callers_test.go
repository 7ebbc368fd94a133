package located_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/internal/located"
	"github.com/peerboot/peerboot/netboot"
	"github.com/peerboot/peerboot/recipe"
)

// TestBothInputsLocated runs the two readers of user-written TOML, a recipe and
// the serve inventory, on syntax errors the decoder places a line too late, and
// checks that each says the line the user sees, as a located.Errors.
func TestBothInputsLocated(t *testing.T) {
	dir := t.TempDir()
	parse := map[string]func(name string, src []byte) error{
		"recipe": func(name string, src []byte) error {
			path := filepath.Join(dir, name)
			if err := os.WriteFile(path, src, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := recipe.Load(path)
			return err
		},
		"inventory": func(name string, src []byte) error {
			_, err := netboot.ParseInventory(name, src)
			return err
		},
	}
	tests := []struct {
		input, name, src string
		want             string
	}{
		{"recipe", "header.toml", "name = \"x\"\n[kernel\n", "header.toml:2: expected '.' or ']' to end table name, but got '\\n' instead"},
		{"recipe", "string.toml", "name = \"x\"\n\n[kernel]\nversion = \"6.1\ncmdline = []\n", "string.toml:4: kernel.version: strings cannot contain newlines"},
		{"recipe", "array.toml", "name = \"x\"\n[[repo]\n", "array.toml:2: expected end of table array name delimiter ']', but got '\\n' instead"},
		{"inventory", "header.toml", "default = \"x\"\n[node\n", "header.toml:2: expected '.' or ']' to end table name, but got '\\n' instead"},
		{"inventory", "string.toml", "default = \"x\"\n\n[[node]]\nmac = \"52:54\nrecipe = \"x\"\n", "string.toml:4: node.mac: strings cannot contain newlines"},
		{"inventory", "array.toml", "default = \"x\"\n[[node]\n", "array.toml:2: expected end of table array name delimiter ']', but got '\\n' instead"},
	}
	for _, tt := range tests {
		t.Run(tt.input+"/"+tt.name, func(t *testing.T) {
			err := parse[tt.input](tt.name, []byte(tt.src))
			var es located.Errors
			if !errors.As(err, &es) || len(es) != 1 {
				t.Fatalf("got %v (%T), want one located.Error", err, err)
			}
			got := strings.TrimPrefix(es[0].Error(), dir+"/") // a recipe is named by its path
			if got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}
