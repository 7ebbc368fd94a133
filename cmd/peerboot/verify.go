package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/sign"
)

// verifyJSON is `peerboot verify --json`: Checks are the checks that passed
// ("SHA256SUMS: signature OK (ECDSA P-256)"), Problems every one that failed.
type verifyJSON struct {
	Dir      string        `json:"dir"`
	OK       bool          `json:"ok"`
	Checks   []string      `json:"checks"`
	Problems []problemJSON `json:"problems"`
}

type problemJSON struct {
	File string `json:"file"`
	What string `json:"what"`
}

var errArtifactKey = errors.New("--artifact-key is required")

func verifyCmd() *cobra.Command {
	var opt sign.VerifyOptions
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "verify OUTDIR --key PUB [--db-cert CERT] [--module-cert CERT] [--pcr-pub PUB]",
		Short: "Verify a signed build output",
		Long: `verify checks a signed output directory: the SHA256SUMS signature (SHA256SUMS.sig)
with --key (a PEM public key such as cosign.pub; a path, file:PATH or env:VAR), every
listed file's sha256, the provenance envelope's signature and that its subjects are
exactly the files SHA256SUMS lists, that a cosign.pub in OUTDIR is the given key, and
with --db-cert every listed .efi's Authenticode signature (sbverify --cert), and with
--module-cert the signature of every kernel module inside each initramfs (pxe/initrd.img
and each UKI's .initrd section), as the kernel checks it with module.sig_enforce=1.
A UKI with a .pcrsig section (built with sign.pcr_key) has each signed PCR 11 policy
checked against its .pcrpkey and against the PCR 11 values predicted from its own
sections, so a section changed after signing is a problem; --pcr-pub also requires
.pcrpkey to be that key (and every UKI to carry .pcrsig).

Every problem is printed as "FILE: what was wrong". Exit 0 when all checks pass, 6
(integrity) when any fails, 2 for a bad command line, an unreadable key or an OUTDIR that
is not a directory. An output
never signed is one problem: "not signed: run ` + "`peerboot sign`" + `". --json prints the
checks and problems as JSON (docs/commands.md, "Machine-readable output").`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opt.Key == "" {
				return exitcode.Tag(exitcode.Usage, errors.New("--key is required"))
			}
			if err := outDirArg(args[0]); err != nil {
				return err
			}
			var log bytes.Buffer
			opt.Log = cmd.OutOrStdout()
			if asJSON {
				opt.Log = &log
			}
			err := sign.Verify(cmd.Context(), args[0], opt)
			var verr *sign.VerifyError
			switch {
			case errors.As(err, &verr):
				err = exitcode.Tag(exitcode.Integrity, err)
			case err != nil:
				return exitcode.Tag(exitcode.Usage, err)
			}
			if asJSON {
				j := verifyJSON{Dir: args[0], OK: verr == nil, Checks: []string{}, Problems: []problemJSON{}}
				for _, l := range strings.Split(strings.TrimSpace(log.String()), "\n") {
					if l = strings.TrimPrefix(l, "verify: "); l != "" {
						j.Checks = append(j.Checks, l)
					}
				}
				if verr != nil {
					for _, p := range verr.Problems {
						j.Problems = append(j.Problems, problemJSON{File: p.File, What: p.What})
					}
				}
				if werr := writeJSON(cmd.OutOrStdout(), j); werr != nil {
					return werr
				}
				return err
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: OK\n", args[0])
			return nil
		},
	}
	addJSONFlag(cmd, &asJSON)
	cmd.Flags().StringVar(&opt.Key, "key", "", "artifact public key (PEM, e.g. cosign.pub): a path, file:PATH or env:VAR")
	cmd.Flags().StringVar(&opt.DBCert, "db-cert", "", "Secure Boot db certificate to check the UKI's Authenticode signature against")
	cmd.Flags().StringVar(&opt.ModuleCert, "module-cert", "", "module-signing certificate to check every module in the initramfs against")
	cmd.Flags().StringVar(&opt.PCRPub, "pcr-pub", "", "PCR policy public key (PEM, e.g. pcr.pub): every UKI's .pcrpkey must be it")
	return cmd
}
