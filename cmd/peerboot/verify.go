package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/sign"
)

var errArtifactKey = errors.New("--artifact-key is required")

func verifyCmd() *cobra.Command {
	var opt sign.VerifyOptions
	cmd := &cobra.Command{
		Use:   "verify OUTDIR --key PUB [--db-cert CERT] [--module-cert CERT]",
		Short: "Verify a signed build output",
		Long: `verify checks a signed output directory: the SHA256SUMS signature (SHA256SUMS.sig)
with --key (a PEM public key such as cosign.pub; a path, file:PATH or env:VAR), every
listed file's sha256, the provenance envelope's signature and that its subjects are
exactly the files SHA256SUMS lists, that a cosign.pub in OUTDIR is the given key, and
with --db-cert every listed .efi's Authenticode signature (sbverify --cert), and with
--module-cert the signature of every kernel module inside each initramfs (pxe/initrd.img
and each UKI's .initrd section), as the kernel checks it with module.sig_enforce=1.

Every problem is printed as "FILE: what was wrong". Exit 0 when all checks pass, 6
(integrity) when any fails, 2 for a bad command line or unreadable key.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opt.Key == "" {
				return exitcode.Tag(exitcode.Usage, errors.New("--key is required"))
			}
			opt.Log = cmd.OutOrStdout()
			err := sign.Verify(cmd.Context(), args[0], opt)
			var verr *sign.VerifyError
			switch {
			case errors.As(err, &verr):
				return exitcode.Tag(exitcode.Integrity, err)
			case err != nil:
				return exitcode.Tag(exitcode.Usage, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: OK\n", args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&opt.Key, "key", "", "artifact public key (PEM), e.g. cosign.pub")
	cmd.Flags().StringVar(&opt.DBCert, "db-cert", "", "Secure Boot db certificate to check the UKI's Authenticode signature against")
	cmd.Flags().StringVar(&opt.ModuleCert, "module-cert", "", "module-signing certificate to check every module in the initramfs against")
	return cmd
}
