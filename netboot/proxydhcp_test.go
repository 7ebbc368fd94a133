package netboot

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
)

var testMAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}

func pxeDiscover(t *testing.T, mods ...dhcpv4.Modifier) []byte {
	t.Helper()
	d, err := dhcpv4.NewDiscovery(testMAC, mods...)
	if err != nil {
		t.Fatal(err)
	}
	return d.ToBytes()
}

func TestProxyDHCPReply(t *testing.T) {
	p := &ProxyDHCP{ServerIP: net.ParseIP("10.0.0.1"), Chain: "http://10.0.0.1:8080/boot.ipxe?mac=${net0/mac}"}
	pxe := dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001"))
	tests := []struct {
		name string
		pkt  []byte
		typ  dhcpv4.MessageType
		file string
	}{
		{"BIOS firmware", pxeDiscover(t, pxe, dhcpv4.WithOption(dhcpv4.OptClientArch(iana.INTEL_X86PC))), dhcpv4.MessageTypeOffer, "undionly.kpxe"},
		{"UEFI firmware", pxeDiscover(t, pxe, dhcpv4.WithOption(dhcpv4.OptClientArch(iana.EFI_X86_64))), dhcpv4.MessageTypeOffer, "ipxe.efi"},
		{"iPXE", pxeDiscover(t, pxe, dhcpv4.WithUserClass("iPXE", false)), dhcpv4.MessageTypeOffer, p.Chain},
		{"request on 4011", func() []byte {
			d, _ := dhcpv4.New(dhcpv4.WithHwAddr(testMAC), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest), pxe)
			return d.ToBytes()
		}(), dhcpv4.MessageTypeAck, "undionly.kpxe"},
		{"ordinary client", pxeDiscover(t), dhcpv4.MessageTypeNone, ""},
		{"garbage", []byte("hello"), dhcpv4.MessageTypeNone, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := p.Reply(tt.pkt)
			if tt.typ == dhcpv4.MessageTypeNone {
				if r != nil {
					t.Fatalf("answered: %v", r)
				}
				return
			}
			if r == nil {
				t.Fatal("no answer")
			}
			if r.MessageType() != tt.typ || r.BootFileName != tt.file || !r.YourIPAddr.Equal(net.IPv4zero) ||
				!r.ServerIPAddr.Equal(p.ServerIP) || r.ClassIdentifier() != "PXEClient" || !bytes.Equal(r.ClientHWAddr, testMAC) ||
				!bytes.Equal(r.GetOneOption(dhcpv4.OptionVendorSpecificInformation), []byte{6, 1, 8, 255}) {
				t.Errorf("reply: %s", r.Summary())
			}
		})
	}
}

func FuzzProxyDHCP(f *testing.F) {
	d, _ := dhcpv4.NewDiscovery(testMAC, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient")), dhcpv4.WithUserClass("iPXE", false))
	f.Add(d.ToBytes())
	f.Add([]byte{1, 1, 6, 0})
	p := &ProxyDHCP{ServerIP: net.ParseIP("10.0.0.1"), Chain: "http://x/boot.ipxe"}
	f.Fuzz(func(t *testing.T, pkt []byte) {
		if r, _ := p.Reply(pkt); r != nil && r.ClassIdentifier() != "PXEClient" {
			t.Fatal("answered without PXEClient")
		}
	})
}

// TestProxyDHCPInNetns: a PXE DISCOVER broadcast from one namespace gets the proxy's
// offer over a veth from the other; an ordinary client's DISCOVER gets nothing.
func TestProxyDHCPInNetns(t *testing.T) {
	if testing.Short() {
		t.Skip("creates network namespaces")
	}
	ns := newNetnsPair(t)
	addrFile := filepath.Join(t.TempDir(), "addr")
	chain := "http://" + ns.serverIP + ":8080/boot.ipxe?mac=${net0/mac}"
	srv := exec.Command("ip", "netns", "exec", ns.server, os.Args[0], "-test.run=^$")
	srv.Env = append(os.Environ(), helperEnv+"=proxydhcp", "NETBOOT_IFACE="+ns.serverIf, "NETBOOT_SERVER_IP="+ns.serverIP,
		"NETBOOT_CHAIN="+chain, "NETBOOT_ADDR="+addrFile)
	var stderr bytes.Buffer
	srv.Stderr = &stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	waitFile(t, addrFile, &stderr)

	client := ns.inClient(t, func() (net.PacketConn, error) {
		return ListenProxyDHCP(context.Background(), ns.clientIf, "0.0.0.0:68") // the same socket options a DHCP client needs
	})
	defer client.Close()
	bcast := &net.UDPAddr{IP: net.IPv4bcast, Port: 67}
	ask := func(pkt []byte) *dhcpv4.DHCPv4 {
		if _, err := client.WriteTo(pkt, bcast); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1500)
		client.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, _, err := client.ReadFrom(buf)
		if err != nil {
			return nil
		}
		r, err := dhcpv4.FromBytes(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := ask(pxeDiscover(t)); r != nil {
		t.Errorf("an ordinary client got an answer: %s", r.Summary())
	}
	r := ask(pxeDiscover(t, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00007:UNDI:003016")),
		dhcpv4.WithOption(dhcpv4.OptClientArch(iana.EFI_X86_64))))
	if r == nil {
		t.Fatalf("no offer over the veth\n%s", stderr.String())
	}
	if r.MessageType() != dhcpv4.MessageTypeOffer || r.BootFileName != "ipxe.efi" || !r.ServerIPAddr.Equal(net.ParseIP(ns.serverIP)) {
		t.Errorf("offer: %s", r.Summary())
	}
	r = ask(pxeDiscover(t, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient")), dhcpv4.WithUserClass("iPXE", false)))
	if r == nil || r.BootFileName != chain {
		t.Errorf("iPXE offer: %v", r)
	}
}
