package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestImportPinned: files enter the store in order, each only if its sha256 is
// a pin; the first that is not stops the import, naming the file and its
// sha256, and what came before it stays imported and is returned.
func TestImportPinned(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) (string, string) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p, sumOf([]byte(body))
	}
	a, sa := write("a.run", "installer A")
	b, sb := write("b.deb", "package B")
	x, sx := write("x.run", "not pinned")
	pins := map[string]string{sa: "nvidia-installer", sb: "libfoo"}
	tests := []struct {
		name    string
		files   []string
		want    []Imported
		wantErr string // "": none; else the error's text, which wraps ErrNoPin
	}{
		{"all pinned", []string{a, b}, []Imported{{a, "nvidia-installer", sa}, {b, "libfoo", sb}}, ""},
		{"stops at the first unpinned", []string{a, x, b}, []Imported{{a, "nvidia-installer", sa}}, x + " (sha256 " + sx + ") matches no pin"},
		{"none", nil, []Imported{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			got, err := st.ImportPinned(context.Background(), tt.files, pins)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr || !errors.Is(err, ErrNoPin)) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("imported %+v, want %+v", got, tt.want)
			}
			for _, sum := range []string{sa, sb, sx} {
				want := false
				for _, im := range tt.want {
					want = want || im.SHA256 == sum
				}
				if st.HasBlob(sum) != want {
					t.Errorf("HasBlob(%.12s) = %t, want %t", sum, !want, want)
				}
			}
		})
	}
}
