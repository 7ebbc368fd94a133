package netboot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
	"golang.org/x/sys/unix"
)

// ProxyDHCP answers PXE clients only (DHCPDISCOVER and DHCPREQUEST whose vendor class
// starts with "PXEClient"), for networks whose DHCP server cannot be changed: the site's
// server gives the address, this one the boot file (PXE spec 2.1, "ProxyDHCP"). Its
// offers carry no address. Firmware gets a first-stage iPXE by TFTP (undionly.kpxe for
// BIOS, ipxe.efi for UEFI); iPXE itself (user class "iPXE") gets the HTTP chain URL.
type ProxyDHCP struct {
	Interface string // the interface to answer on (SO_BINDTODEVICE); required
	ServerIP  net.IP // this host's address on Interface: next-server and server identifier
	Chain     string // URL iPXE chains to, e.g. http://10.0.0.1:8080/boot.ipxe?mac=${net0/mac}
	BIOSFile  string // default "undionly.kpxe"
	UEFIFile  string // default "ipxe.efi"
	Log       *slog.Logger
}

// ListenProxyDHCP opens the UDP socket a ProxyDHCP reads: port 67 (or addr's), with
// SO_BROADCAST and SO_REUSEADDR (the site's DHCP server may share the host), bound to
// the interface so broadcasts go out of it.
func ListenProxyDHCP(ctx context.Context, iface, addr string) (net.PacketConn, error) {
	lc := net.ListenConfig{Control: func(network, address string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			for _, o := range []int{unix.SO_BROADCAST, unix.SO_REUSEADDR} {
				if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o, 1); serr != nil {
					return
				}
			}
			if iface != "" {
				serr = unix.BindToDevice(int(fd), iface)
			}
		})
		return errors.Join(err, serr)
	}}
	pc, err := lc.ListenPacket(ctx, "udp4", addr)
	if err != nil {
		return nil, fmt.Errorf("ProxyDHCP on %s (%s): %w", iface, addr, err)
	}
	return pc, nil
}

// Serve answers on pc until ctx ends.
func (p *ProxyDHCP) Serve(ctx context.Context, pc net.PacketConn) error {
	if p.Log == nil {
		p.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if p.ServerIP.To4() == nil {
		return errors.New("ProxyDHCP: the server's IPv4 address is required")
	}
	go func() {
		<-ctx.Done()
		pc.Close()
	}()
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("ProxyDHCP: %w", err)
		}
		reply, why := p.Reply(buf[:n])
		if reply == nil {
			if why != "" {
				p.Log.Debug("proxydhcp ignored", "remote", from.String(), "why", why)
			}
			continue
		}
		// A PXE client has no address yet: broadcast, unless it asked on port 4011 from one.
		to := &net.UDPAddr{IP: net.IPv4bcast, Port: 68}
		if ua, ok := from.(*net.UDPAddr); ok && !ua.IP.IsUnspecified() && !ua.IP.Equal(net.IPv4bcast) {
			to = ua
		}
		if _, err := pc.WriteTo(reply.ToBytes(), to); err != nil {
			p.Log.Warn("proxydhcp reply failed", "to", to.String(), "error", err.Error())
			continue
		}
		p.Log.Info("proxydhcp", "mac", reply.ClientHWAddr.String(), "type", reply.MessageType().String(), "file", reply.BootFileName)
	}
}

// Reply makes the answer to one packet, or nil and why it is ignored.
func (p *ProxyDHCP) Reply(pkt []byte) (*dhcpv4.DHCPv4, string) {
	req, err := dhcpv4.FromBytes(pkt)
	if err != nil {
		return nil, "not DHCP: " + err.Error()
	}
	if req.OpCode != dhcpv4.OpcodeBootRequest {
		return nil, "not a request"
	}
	if !strings.HasPrefix(req.ClassIdentifier(), "PXEClient") {
		return nil, "" // an ordinary client: the site's DHCP server answers it
	}
	var typ dhcpv4.MessageType
	switch req.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		typ = dhcpv4.MessageTypeOffer
	case dhcpv4.MessageTypeRequest:
		typ = dhcpv4.MessageTypeAck
	default:
		return nil, "message type " + req.MessageType().String()
	}
	file := p.bootFile(req)
	reply, err := dhcpv4.NewReplyFromRequest(req,
		dhcpv4.WithMessageType(typ),
		dhcpv4.WithYourIP(net.IPv4zero), // the address comes from the site's server
		dhcpv4.WithServerIP(p.ServerIP),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(p.ServerIP)),
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient")),
		// PXE vendor options: discovery control 8 = boot the file named here, no
		// boot-server discovery or menu.
		dhcpv4.WithGeneric(dhcpv4.OptionVendorSpecificInformation, []byte{6, 1, 8, 255}),
		dhcpv4.WithOptionCopied(req, dhcpv4.OptionClientMachineIdentifier),
	)
	if err != nil {
		return nil, err.Error()
	}
	reply.BootFileName = file
	reply.SetBroadcast()
	return reply, ""
}

// bootFile picks what the client should load: iPXE already runs -> the HTTP chain;
// else the first-stage iPXE for its firmware (option 93).
func (p *ProxyDHCP) bootFile(req *dhcpv4.DHCPv4) string {
	for _, uc := range req.UserClass() {
		if uc == "iPXE" && p.Chain != "" {
			return p.Chain
		}
	}
	bios, uefi := p.BIOSFile, p.UEFIFile
	if bios == "" {
		bios = "undionly.kpxe"
	}
	if uefi == "" {
		uefi = "ipxe.efi"
	}
	for _, a := range req.ClientArch() {
		switch a {
		case iana.EFI_X86_64, iana.EFI_BC, iana.EFI_X86_64_HTTP:
			return uefi
		}
	}
	return bios
}
