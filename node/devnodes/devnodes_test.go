package devnodes

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/internal/testfs"
)

const procDevices = `Character devices:
  1 mem
  4 /dev/vc/0
195 nvidia-frontend
195 nvidia
237 nvidia-uvm
254 gpiochip

Block devices:
  8 sd
237 notchar
`

func TestNvidiaNodes(t *testing.T) {
	proc := t.TempDir()
	testfs.Write(t, filepath.Join(proc, "devices"), procDevices)
	for _, bdf := range []string{"0000:01:00.0", "0000:41:00.0"} {
		testfs.Write(t, filepath.Join(proc, "driver", "nvidia", "gpus", bdf, "information"), "Model: x\n")
	}
	got, err := Nvidia(proc, map[string]bool{"nvidia": true, "nvidia_uvm": true, "nvidia_modeset": true})
	if err != nil {
		t.Fatal(err)
	}
	want := []Node{{"nvidiactl", 195, 255}, {"nvidia0", 195, 0}, {"nvidia1", 195, 1}, {"nvidia-modeset", 195, 254},
		{"nvidia-uvm", 237, 0}, {"nvidia-uvm-tools", 237, 1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	if got, err := Nvidia(proc, map[string]bool{}); got != nil || err != nil {
		t.Errorf("nvidia not loaded: %v %v", got, err)
	}
	// uvm loaded but unregistered: the nodes we can make, plus an error.
	testfs.Write(t, filepath.Join(proc, "devices"), "Character devices:\n195 nvidia\n")
	got, err = Nvidia(proc, map[string]bool{"nvidia": true, "nvidia_uvm": true})
	if err == nil || len(got) != 3 {
		t.Errorf("got %v, %v", got, err)
	}
}

func TestMakeNodes(t *testing.T) {
	dev := t.TempDir()
	var made []string
	mknod := func(path string, mode uint32, d int) error {
		made = append(made, filepath.Base(path))
		return nil
	}
	if err := Make(dev, []Node{{"nvidiactl", 195, 255}, {"nvidia0", 195, 0}}, mknod); err != nil {
		t.Fatal(err)
	}
	if strings.Join(made, ",") != "nvidiactl,nvidia0" {
		t.Errorf("made %v", made)
	}
}
