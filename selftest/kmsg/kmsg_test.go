package kmsg

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/selftest"
)

func TestClassify(t *testing.T) {
	type ev = selftest.KEvent
	const (
		xid  = selftest.KEventXid
		iom  = selftest.KEventIOMMU
		fw   = selftest.KEventFirmware
		nvrm = selftest.KEventNVRM
	)
	tests := []struct {
		line string
		want *ev // nil: not an event
	}{
		// Xid, in /dev/kmsg record form, dmesg form and bare.
		{"4,1234,5678901,-;NVRM: Xid (PCI:0000:01:00): 79, pid=2213, name=python3, GPU has fallen off the bus.",
			&ev{Kind: xid, Code: 79, BDF: "0000:01:00.0", Line: "NVRM: Xid (PCI:0000:01:00): 79, pid=2213, name=python3, GPU has fallen off the bus."}},
		{"[  812.345678] NVRM: Xid (PCI:0000:C1:00): 31, pid=4410, name=all_reduce_perf, Ch 00000010, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f3c_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
			&ev{Kind: xid, Code: 31, BDF: "0000:c1:00.0", Line: "NVRM: Xid (PCI:0000:C1:00): 31, pid=4410, name=all_reduce_perf, Ch 00000010, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f3c_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ"}},
		{"NVRM: Xid (PCI:0000:41:00): 119, pid=1, name=p2pcheck, Timeout after 6s of waiting for RPC response from GPU1 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4).",
			&ev{Kind: xid, Code: 119, BDF: "0000:41:00.0", Line: "NVRM: Xid (PCI:0000:41:00): 119, pid=1, name=p2pcheck, Timeout after 6s of waiting for RPC response from GPU1 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4)."}},
		{"[Sun Nov 29 14:01:33 2026] NVRM: Xid (0000:02:00): 13, Graphics SM Warp Exception",
			&ev{Kind: xid, Code: 13, BDF: "0000:02:00.0", Line: "NVRM: Xid (0000:02:00): 13, Graphics SM Warp Exception"}},
		{"6,2001,99887766,-,caller=T412;NVRM: Xid (PCI:00000001:81:00): 62, pid='<unknown>', name=<unknown>, 0000cad2 00000000",
			&ev{Kind: xid, Code: 62, BDF: "0001:81:00.0", Line: "NVRM: Xid (PCI:00000001:81:00): 62, pid='<unknown>', name=<unknown>, 0000cad2 00000000"}},

		// Intel VT-d.
		{"3,4410,123456789,-;DMAR: [DMA Read NO_PASID] Request device [01:00.0] fault addr 0x7f000000 [fault reason 0x06] PTE Read access is not set",
			&ev{Kind: iom, BDF: "0000:01:00.0", Line: "DMAR: [DMA Read NO_PASID] Request device [01:00.0] fault addr 0x7f000000 [fault reason 0x06] PTE Read access is not set"}},
		{"[   98.100201] DMAR: DRHD: handling fault status reg 2",
			&ev{Kind: iom, Line: "DMAR: DRHD: handling fault status reg 2"}},
		{"[   98.100233] DMAR: [DMA Write] Request device [1b:00.0] PASID ffffffff fault addr 3c8000000 [fault reason 05] PTE Write access is not set",
			&ev{Kind: iom, BDF: "0000:1b:00.0", Line: "DMAR: [DMA Write] Request device [1b:00.0] PASID ffffffff fault addr 3c8000000 [fault reason 05] PTE Write access is not set"}},
		{"DMAR: [INTR-REMAP] Request device [f0:1f.0] fault index 0x0 [fault reason 0x25] Blocked a compatibility format interrupt request",
			&ev{Kind: iom, BDF: "0000:f0:1f.0", Line: "DMAR: [INTR-REMAP] Request device [f0:1f.0] fault index 0x0 [fault reason 0x25] Blocked a compatibility format interrupt request"}},

		// AMD-Vi, old and new shapes.
		{"[  301.002211] AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x000e address=0x7f0000000 flags=0x0020]",
			&ev{Kind: iom, Line: "AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x000e address=0x7f0000000 flags=0x0020]"}},
		{"AMD-Vi: Event logged [IO_PAGE_FAULT device=41:00.0 domain=0x000e address=0x00000000fdf0a000 flags=0x0020]",
			&ev{Kind: iom, BDF: "0000:41:00.0", Line: "AMD-Vi: Event logged [IO_PAGE_FAULT device=41:00.0 domain=0x000e address=0x00000000fdf0a000 flags=0x0020]"}},
		{"3,901,30100221,-;nvidia 0000:41:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x0023 address=0x38c000000 flags=0x0030]",
			&ev{Kind: iom, BDF: "0000:41:00.0", Line: "nvidia 0000:41:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x0023 address=0x38c000000 flags=0x0030]"}},
		{"iommu ivhd0: AMD-Vi: Event logged [INVALID_DEVICE_REQUEST device=0000:c1:00.0 pasid=0x00000 address=0xfffffffdf8000000 flags=0x0a00]",
			&ev{Kind: iom, BDF: "0000:c1:00.0", Line: "iommu ivhd0: AMD-Vi: Event logged [INVALID_DEVICE_REQUEST device=0000:c1:00.0 pasid=0x00000 address=0xfffffffdf8000000 flags=0x0a00]"}},

		// Firmware.
		{"[    5.512001] nvidia 0000:01:00.0: Direct firmware load for nvidia/535.261.03/gsp_ga10x.bin failed with error -2",
			&ev{Kind: fw, BDF: "0000:01:00.0", Line: "nvidia 0000:01:00.0: Direct firmware load for nvidia/535.261.03/gsp_ga10x.bin failed with error -2"}},
		{"NVRM: RmFetchGspRmImages: No firmware image found",
			&ev{Kind: fw, Line: "NVRM: RmFetchGspRmImages: No firmware image found"}},
		{"NVRM: GPU 0000:21:00.0: GSP firmware boot failed",
			&ev{Kind: fw, BDF: "0000:21:00.0", Line: "NVRM: GPU 0000:21:00.0: GSP firmware boot failed"}},
		{"firmware: failed to load nvidia/535.261.03/gsp_tu10x.bin (-2)",
			&ev{Kind: fw, Line: "firmware: failed to load nvidia/535.261.03/gsp_tu10x.bin (-2)"}},

		// Other NVRM errors.
		{"[    6.002002] NVRM: RmInitAdapter failed! (0x26:0xffff:1464)",
			&ev{Kind: nvrm, Line: "NVRM: RmInitAdapter failed! (0x26:0xffff:1464)"}},
		{"3,777,6002003,-;NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x62:0x65:1808)",
			&ev{Kind: nvrm, BDF: "0000:01:00.0", Line: "NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x62:0x65:1808)"}},
		{"NVRM: rm_init_adapter failed, device minor number 0",
			&ev{Kind: nvrm, Line: "NVRM: rm_init_adapter failed, device minor number 0"}},
		{"NVRM: GPU 0000:61:00.0: GPU has fallen off the bus.",
			&ev{Kind: nvrm, BDF: "0000:61:00.0", Line: "NVRM: GPU 0000:61:00.0: GPU has fallen off the bus."}},
		{"NVRM: API mismatch: the client has the version 550.54.15, but this kernel module has the version 535.261.03.  Please make sure that this kernel module and all NVIDIA driver components have the same version.",
			&ev{Kind: nvrm, Line: "NVRM: API mismatch: the client has the version 550.54.15, but this kernel module has the version 535.261.03.  Please make sure that this kernel module and all NVIDIA driver components have the same version."}},
		{"NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:",
			&ev{Kind: nvrm, Line: "NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:"}},
		{"NVRM: The NVIDIA probe routine was not called for 1 device(s).",
			&ev{Kind: nvrm, Line: "NVRM: The NVIDIA probe routine was not called for 1 device(s)."}},

		// Not events.
		{"6,1,0,-;Linux version 6.1.0-42-amd64 (debian-kernel@lists.debian.org)", nil},
		{"[    5.100000] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  535.261.03  Release Build  (dvs-builder@U16-I3-B03-4-3)", nil},
		{"NVRM: nvCheckOkFailedNoLog: Check failed: Call not supported [NV_ERR_NOT_SUPPORTED] (0x00000056) returned from pRmApi->Control", nil},
		{"DMAR: IOMMU enabled", nil},
		{"DMAR: Host address width 46", nil},
		{"AMD-Vi: Interrupt remapping enabled", nil},
		{"iwlwifi 0000:00:14.3: Direct firmware load for iwlwifi-so-a0-gf-a0-89.ucode failed with error -2", nil},
		{" SUBSYSTEM=pci", nil},
		{" DEVICE=+pci:0000:01:00.0", nil},
		{"NVRM: Xid mentioned without an address", nil},
		{"", nil},
	}
	for _, tc := range tests {
		got, ok := Classify(tc.line)
		if tc.want == nil {
			if ok {
				t.Errorf("Classify(%q) = %+v, want no event", tc.line, got)
			}
			continue
		}
		if !ok || got != *tc.want {
			t.Errorf("Classify(%q)\n got %+v, %v\nwant %+v", tc.line, got, ok, *tc.want)
		}
	}
}

// A boot log in dmesg form: the DRHD header folds into the fault record after it.
const dmesgLog = `[    0.000000] Linux version 6.1.0-42-amd64 (debian-kernel@lists.debian.org)
[    0.412000] DMAR: IOMMU enabled
[    5.100000] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  535.261.03  Release Build
[   98.100201] DMAR: DRHD: handling fault status reg 2
[   98.100233] DMAR: [DMA Write] Request device [1b:00.0] PASID ffffffff fault addr 3c8000000 [fault reason 05] PTE Write access is not set
[   98.100290] DMAR: DRHD: handling fault status reg 3
[  120.000001] NVRM: Xid (PCI:0000:1b:00): 79, pid=2213, name=python3, GPU has fallen off the bus.
[  120.000040] NVRM: GPU 0000:1b:00.0: GPU has fallen off the bus.
`

func TestScan(t *testing.T) {
	got := Scan(strings.NewReader(dmesgLog))
	want := []selftest.KEvent{
		{Kind: selftest.KEventIOMMU, BDF: "0000:1b:00.0", Line: "DMAR: [DMA Write] Request device [1b:00.0] PASID ffffffff fault addr 3c8000000 [fault reason 05] PTE Write access is not set"},
		{Kind: selftest.KEventIOMMU, Line: "DMAR: DRHD: handling fault status reg 3"},
		{Kind: selftest.KEventXid, BDF: "0000:1b:00.0", Code: 79, Line: "NVRM: Xid (PCI:0000:1b:00): 79, pid=2213, name=python3, GPU has fallen off the bus."},
		{Kind: selftest.KEventNVRM, BDF: "0000:1b:00.0", Line: "NVRM: GPU 0000:1b:00.0: GPU has fallen off the bus."},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if got := Scan(strings.NewReader("")); got == nil || len(got) != 0 {
		t.Errorf("empty log: %#v", got)
	}
	// A huge line and no final newline: the event after the huge line is still found.
	long := strings.Repeat("z", 3*scanLineMax) + "\n" + "NVRM: RmInitAdapter failed! (0x26:0xffff:1464)"
	if got := Scan(strings.NewReader(long)); len(got) != 1 || got[0].Kind != selftest.KEventNVRM {
		t.Errorf("long line: %+v", got)
	}
}

// The watch on a regular file: what was there before Start is not reported, records
// appended later are, lines split across writes are put back together, and the
// dictionary lines of kmsg records are skipped. What the real /dev/kmsg adds (one
// record per read, EAGAIN when drained, EPIPE after an overrun) is exercised by
// TestWatchDevKmsg where the machine allows it, and by TestWatchPipe for EAGAIN.
func TestWatchFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kmsg")
	if err := os.WriteFile(p, []byte("4,1,10,-;NVRM: Xid (PCI:0000:01:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := Start(p)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if evs, err := w.Events(); err != nil || len(evs) != 0 || evs == nil {
		t.Fatalf("before anything new: %#v, %v", evs, err)
	}
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString("6,2,20,-;nvidia 0000:21:00.0: enabling device (0000 -> 0003)\n SUBSYSTEM=pci\n DEVICE=+pci:0000:21:00.0\n")
	f.WriteString("3,3,30,-;nvidia 0000:21:00.0: Direct firmware load for nvidia/535.261.03/gsp_ga10x.bin fai")
	evs, err := w.Events()
	if err != nil || len(evs) != 0 {
		t.Fatalf("half a record: %+v, %v", evs, err)
	}
	f.WriteString("led with error -2\n")
	f.WriteString("3,4,40,-;NVRM: GPU 0000:21:00.0: RmInitAdapter failed! (0x62:0x65:1808)\n")
	evs, err = w.Events()
	want := []selftest.KEvent{
		{Kind: selftest.KEventFirmware, BDF: "0000:21:00.0", Line: "nvidia 0000:21:00.0: Direct firmware load for nvidia/535.261.03/gsp_ga10x.bin failed with error -2"},
		{Kind: selftest.KEventNVRM, BDF: "0000:21:00.0", Line: "NVRM: GPU 0000:21:00.0: RmInitAdapter failed! (0x62:0x65:1808)"},
	}
	if err != nil || !reflect.DeepEqual(evs, want) {
		t.Errorf("got %+v, %v\nwant %+v", evs, err, want)
	}
	if evs, _ := w.Events(); len(evs) != 0 {
		t.Errorf("events twice: %+v", evs)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Events(); err == nil {
		t.Error("Events after Close: no error")
	}
}

// A non-blocking pipe answers EAGAIN when drained, as /dev/kmsg does, and cannot seek.
func TestWatchPipe(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(p, 0o600); err != nil {
		testguard.Skipf(t, "mkfifo: %v", err)
	}
	w, err := Start(p) // non-blocking open of a FIFO's read end succeeds without a writer
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if evs, err := w.Events(); err != nil || len(evs) != 0 {
		t.Fatalf("empty pipe: %+v, %v", evs, err)
	}
	f.WriteString("[  301.002211] AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x000e address=0x7f0000000 flags=0x0020]\n")
	evs, err := w.Events()
	if err != nil || len(evs) != 1 || evs[0].Kind != selftest.KEventIOMMU {
		t.Errorf("got %+v, %v", evs, err)
	}
}

// The real /dev/kmsg, read-only: Start moves past the boot's records and Events drains
// without blocking. Nothing is written to the host's kernel log.
func TestWatchDevKmsg(t *testing.T) {
	w, err := Start("/dev/kmsg")
	if err != nil {
		testguard.Skipf(t, "no readable /dev/kmsg here (CI runs as root): %v", err)
	}
	defer w.Close()
	if _, err := w.Events(); err != nil {
		t.Errorf("Events: %v", err)
	}
}

func TestStartMissing(t *testing.T) {
	_, err := Start(filepath.Join(t.TempDir(), "absent"))
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "opening the kernel log") {
		t.Errorf("err = %v", err)
	}
}

func FuzzClassify(f *testing.F) {
	for _, s := range []string{
		"4,1234,5678901,-;NVRM: Xid (PCI:0000:01:00): 79, pid=2213, name=python3, GPU has fallen off the bus.",
		"[  98.1] DMAR: [DMA Read NO_PASID] Request device [01:00.0] fault addr 0x7f000000 [fault reason 0x06] PTE Read access is not set",
		"nvidia 0000:41:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x0023 address=0x38c000000 flags=0x0030]",
		"nvidia 0000:01:00.0: Direct firmware load for nvidia/535.261.03/gsp_ga10x.bin failed with error -2",
		"NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x62:0x65:1808)",
		"<3>NVRM: Xid (PCI:ffffffff:ff:ff): 999999, x",
		" SUBSYSTEM=pci",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		ev, ok := Classify(line)
		if !ok {
			if ev != (selftest.KEvent{}) {
				t.Errorf("no event but %+v", ev)
			}
			return
		}
		switch ev.Kind {
		case selftest.KEventXid, selftest.KEventIOMMU, selftest.KEventFirmware, selftest.KEventNVRM:
		default:
			t.Errorf("kind %q", ev.Kind)
		}
		if ev.Line == "" || len(ev.Line) > maxLine {
			t.Errorf("line %q", ev.Line)
		}
		if ev.Kind != selftest.KEventXid && ev.Code != 0 {
			t.Errorf("code on a %s event", ev.Kind)
		}
		if ev.BDF != "" && (ev.BDF != strings.ToLower(ev.BDF) || !strings.Contains(ev.BDF, ".") || strings.Count(ev.BDF, ":") != 2) {
			t.Errorf("bdf %q", ev.BDF)
		}
		if utf8.ValidString(line) && !utf8.ValidString(ev.Line) {
			t.Errorf("line made invalid UTF-8: %q", ev.Line)
		}
		// Scan agrees with Classify on a single line.
		if got := Scan(strings.NewReader(strings.ReplaceAll(line, "\n", " "))); len(got) > 1 {
			t.Errorf("one line, %d events", len(got))
		}
	})
}

// Messages is what the init keeps beside each module load: the message of every new
// record, without its header or the device dictionary lines after it, and nothing
// logged before Start.
func TestWatchMessages(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kmsg")
	if err := os.WriteFile(p, []byte("6,1,1,-;before the watch\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := Start(p)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString("6,1234,5678901,-;NVRM: No NVIDIA GPU found.\n")
	f.WriteString("4,99,1,-,caller=T1;nvidia: Unknown symbol drm_open (err -2)\n SUBSYSTEM=module\n")
	f.WriteString("3,1,2,c;a;b\n")
	got, err := w.Messages()
	want := []string{"NVRM: No NVIDIA GPU found.", "nvidia: Unknown symbol drm_open (err -2)", "a;b"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Messages = %q, %v; want %q", got, err, want)
	}
	if got, err := w.Messages(); err != nil || got == nil || len(got) != 0 {
		t.Errorf("second Messages = %#v, %v; want empty", got, err)
	}
}
