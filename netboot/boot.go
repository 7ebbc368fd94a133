package netboot

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/peerboot/peerboot/bootproto"
	"github.com/peerboot/peerboot/mirror"
	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/output"
)

// nodeWord is what a hostname, serial or node id may be: it is written into boot
// scripts and URLs, so nothing iPXE or a shell would read as syntax.
var nodeWord = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// nodeIdentity is who asked: the MAC iPXE gives as ${net0/mac}, and the DHCP
// hostname and SMBIOS serial when the chain passes them.
type nodeIdentity struct {
	ID, MAC, Host, Serial string
}

// A hostname or serial iPXE could not give cleanly (unset, or SMBIOS text such as
// "To Be Filled By O.E.M.") is dropped, never a reason to refuse the boot; dropped
// lists them for the log.
func parseIdentity(q url.Values) (n nodeIdentity, dropped []string, err error) {
	if m := q.Get("mac"); m != "" {
		mac, err := NormalizeMAC(m)
		if err != nil {
			return n, nil, err
		}
		n.MAC = mac
	}
	for _, f := range []struct {
		key string
		dst *string
	}{{"host", &n.Host}, {"serial", &n.Serial}} {
		v := strings.TrimSpace(q.Get(f.key))
		if v == "" {
			continue
		}
		if !nodeWord.MatchString(v) {
			dropped = append(dropped, fmt.Sprintf("%s=%q", f.key, v))
			continue
		}
		*f.dst = v
	}
	switch {
	case n.MAC != "":
		n.ID = n.MAC
	case n.Serial != "":
		n.ID = "serial:" + n.Serial
	case n.Host != "":
		n.ID = "host:" + n.Host
	default:
		return n, dropped, errors.New("want ?mac=${net0/mac} (and optionally &host=${hostname:uristring}&serial=${serial:uristring})")
	}
	return n, dropped, nil
}

// bootScript answers a node's iPXE chain with a script for its recipe's current build:
// absolute URLs with the build id in them (a rebuild mid-boot cannot mix two builds),
// the sha256 of each file, and the recipe's kernel command line plus the inventory's
// arguments, the report URL and the report token of this node and build.
func (s *Server) bootScript(w http.ResponseWriter, r *http.Request) {
	id, dropped, err := parseIdentity(r.URL.Query())
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, "boot script refused", err)
		return
	}
	if len(dropped) > 0 {
		s.log.Warn("boot script: ignoring unusable node fields", "node", id.ID, "fields", strings.Join(dropped, " "))
	}
	m, ok := s.opt.Inventory.Lookup(id.MAC, id.Host)
	if !ok {
		s.fail(w, r, http.StatusNotFound, "boot script refused", fmt.Errorf("no inventory rule for node %s and no default recipe", id.ID), "node", id.ID)
		return
	}
	b, err := s.chooseBuild(r.Context(), m, id.ID)
	if err != nil {
		s.fail(w, r, http.StatusNotFound, "boot script refused", err, "node", id.ID)
		return
	}
	if !b.HasPXE() {
		s.fail(w, r, http.StatusNotFound, "boot script refused", fmt.Errorf("the build of %s has no PXE bundle (outputs.formats lacks \"pxe\")", b.Recipe), "node", id.ID)
		return
	}
	base, err := s.baseURL(r)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, "boot script refused", err)
		return
	}
	s.mu.Lock()
	s.issued[b.ID] = b.Recipe
	s.mu.Unlock()

	files := base + "/builds/" + b.Recipe + "/" + b.ID + "/pxe/"
	words := []string{
		"initrd=initrd.img", b.Cmdline, m.Args,
		bootproto.Arg(bootproto.ArgReportURL, base+"/reports?node="+id.ID),
		bootproto.Arg(bootproto.ArgToken, s.Token(b.ID, id.ID)),
	}
	// A one-time nonce for the node's attested report (attest.go); without one the
	// node still boots and reports, unattested.
	if nonce, _, err := s.issueNonce(r.Context(), id.ID, b); err != nil {
		s.log.Error("issuing a nonce", "node", id.ID, "error", err.Error())
	} else if nonce != "" {
		words = append(words, bootproto.Arg(bootproto.ArgNonce, nonce))
	}
	kernelURL, initrdURL := files+output.PXEKernel, files+output.InitrdFile
	if s.opt.FilesURL != "" {
		k, i := b.Files[output.PXEKernelPath], b.Files[output.PXEInitrdPath]
		if err := s.fromMirror(r.Context(), k, i); err != nil {
			// Never send a node for bytes the mirror does not hold: serve's own copy boots it.
			s.log.Error("boot files from serve, not the mirror", "node", id.ID, "build", b.ID, "error", err.Error())
		} else {
			kernelURL, initrdURL = mirror.URL(s.opt.FilesURL, k), mirror.URL(s.opt.FilesURL, i)
			// The firmware checks no hash: the init hashes the initrd the kernel
			// kept (retain_initrd) against the one this script names.
			words = append(words, bootproto.RetainInitrd, bootproto.Arg(bootproto.ArgInitrdSHA256, i))
		}
	}
	args := strings.Join(strings.Fields(strings.Join(words, " ")), " ")
	var sb strings.Builder
	sb.WriteString("#!ipxe\n")
	fmt.Fprintf(&sb, "# peerboot serve: node %s", id.ID)
	if m.Name != "" {
		fmt.Fprintf(&sb, " (%s)", m.Name)
	}
	fmt.Fprintf(&sb, " -> recipe %s, build %s\n", b.Recipe, b.ID)
	fmt.Fprintf(&sb, "# sha256 %s  vmlinuz\n", b.Files[output.PXEKernelPath])
	fmt.Fprintf(&sb, "# sha256 %s  initrd.img\n", b.Files[output.PXEInitrdPath])
	fmt.Fprintf(&sb, "echo peerboot: %s build %s\n", b.Recipe, b.ID)
	// The bundle's burn-in entry (the recipe's selftest.soak.menu) is offered here
	// too, as a menu whose default is the normal boot.
	entries := bootproto.BootEntries(b.BurnIn)
	if len(entries) > 1 {
		sb.WriteString(bootproto.IPXEMenu(entries))
	}
	for _, e := range entries {
		if len(entries) > 1 {
			fmt.Fprintf(&sb, ":%s\n", e.Name)
		}
		fmt.Fprintf(&sb, "kernel %s %s\n", kernelURL, strings.TrimSpace(args+" "+e.Args))
		fmt.Fprintf(&sb, "initrd --name initrd.img %s\n", initrdURL)
		sb.WriteString("boot\n")
	}

	if err := s.opt.Store.RecordBoot(r.Context(), fleetdb.Boot{NodeID: id.ID, MAC: id.MAC, Hostname: id.Host, Serial: id.Serial,
		Recipe: b.Recipe, Build: b.ID, Remote: remoteIP(r), At: s.opt.Now()}); err != nil {
		s.log.Error("recording a boot", "node", id.ID, "error", err.Error())
	} else {
		s.prune(r, id.ID)
	}
	s.log.Info("boot script", "node", id.ID, "recipe", b.Recipe, "build", b.ID, "remote", r.RemoteAddr)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	fmt.Fprint(w, sb.String())
}

// buildFile serves one listed file of a build: any build the catalogue holds (a
// rollout serves several of a recipe), "latest" the recipe's newest. A build id the
// catalogue no longer holds (its directory was rebuilt) is 410 Gone: the node
// re-chains /boot.ipxe and gets a build whole.
func (s *Server) buildFile(w http.ResponseWriter, r *http.Request) {
	recipe, id, file := r.PathValue("recipe"), r.PathValue("build"), r.PathValue("file")
	newest, err := s.opt.Builds.Get(recipe)
	if err != nil {
		s.fail(w, r, http.StatusNotFound, "file refused", err)
		return
	}
	b := newest
	if id != "latest" {
		if b = s.opt.Builds.ByID(id); b == nil || b.Recipe != recipe {
			s.fail(w, r, http.StatusGone, "file refused", fmt.Errorf("build %s of %s is no longer served (the newest is %s): fetch /boot.ipxe again", id, recipe, newest.ID))
			return
		}
	}
	s.serveBuildFile(w, r, b, file)
}

func (s *Server) serveBuildFile(w http.ResponseWriter, r *http.Request, b *Build, file string) {
	f, fi, err := b.Open(file)
	switch {
	case errors.Is(err, errRefused):
		s.fail(w, r, http.StatusForbidden, "file refused", err, "recipe", b.Recipe, "file", file)
		return
	case errors.Is(err, fs.ErrNotExist):
		s.fail(w, r, http.StatusNotFound, "file refused", err, "recipe", b.Recipe, "file", file)
		return
	case err != nil:
		s.fail(w, r, http.StatusInternalServerError, "file refused", err, "recipe", b.Recipe, "file", file)
		return
	}
	defer f.Close()
	if h := b.Files[file]; h != "" {
		w.Header().Set("ETag", `"`+h+`"`)
		w.Header().Set("X-Checksum-Sha256", h)
	}
	if strings.HasSuffix(file, ".ipxe") || strings.HasSuffix(file, output.SumsFile) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	} else if strings.HasSuffix(file, ".iso") {
		w.Header().Set("Content-Type", "application/x-iso9660-image")
	} else if !strings.HasSuffix(file, ".json") && !strings.HasSuffix(file, ".jsonl") {
		w.Header().Set("Content-Type", "application/octet-stream")
	}
	// ServeContent does Range, If-Range, If-None-Match and Content-Length.
	http.ServeContent(w, r, fi.Name(), fi.ModTime(), f)
}

// uefi serves a UKI for UEFI HTTP boot: /uefi/boot.efi is the default recipe's,
// /uefi/NAME.efi a named recipe's. The UKI's command line is baked in (and signed),
// so such a node reports to its recipe's boot.report_url with a static token.
func (s *Server) uefi(w http.ResponseWriter, r *http.Request) {
	s.serveNamedBuildFile(w, r, "uefi", ".efi", output.UKIFile, "has no UKI")
}

// iso serves a build's ISO as a download for BMC virtual media: /iso/boot.iso
// is the default recipe's, /iso/NAME.iso a named recipe's. The URL ends in
// .iso because BMCs (Redfish VirtualMedia.InsertMedia) often insist on it, and
// ServeContent answers the Range requests they read the image with.
func (s *Server) iso(w http.ResponseWriter, r *http.Request) {
	s.serveNamedBuildFile(w, r, "iso", ".iso", output.ISOFile, `has no ISO (outputs.formats lacks "iso")`)
}

// serveNamedBuildFile serves file of the build that /route/NAME.ext names, "boot"
// standing for the default recipe; lacking says why a build without the file is refused.
func (s *Server) serveNamedBuildFile(w http.ResponseWriter, r *http.Request, route, ext, file, lacking string) {
	name, ok := strings.CutSuffix(r.PathValue("name"), ext)
	if !ok {
		s.fail(w, r, http.StatusNotFound, "file refused", fmt.Errorf("want /%s/boot%s or /%s/RECIPE%s", route, ext, route, ext))
		return
	}
	if name == "boot" {
		name = s.opt.Inventory.Default
	}
	b, err := s.opt.Builds.Get(name)
	if err != nil {
		s.fail(w, r, http.StatusNotFound, "file refused", err)
		return
	}
	if b.Files[file] == "" {
		s.fail(w, r, http.StatusNotFound, "file refused", fmt.Errorf("the build of %s %s", b.Recipe, lacking))
		return
	}
	s.serveBuildFile(w, r, b, file)
}
