package dl

import (
	"os"
	"strings"
	"testing"
)

func TestOpenAndBind(t *testing.T) {
	libc, err := Open("libc.so.6")
	if err != nil {
		t.Fatal(err)
	}
	var getpid func() int32
	if err := libc.Bind("getpid", &getpid); err != nil {
		t.Fatal(err)
	}
	if got := getpid(); int(got) != os.Getpid() {
		t.Errorf("getpid through the binding: %d, want %d", got, os.Getpid())
	}
	var missing func()
	if err := libc.Bind("peerboot_no_such_symbol", &missing); err == nil || missing != nil {
		t.Errorf("a missing symbol bound (%v)", err)
	}
	if _, err := Open("libpeerboot-absent.so.1"); err == nil || !strings.Contains(err.Error(), "libpeerboot-absent.so.1") {
		t.Errorf("opening an absent library: %v, want an error naming it", err)
	}
}
