package main

import (
	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/sign"
)

func signCmd() *cobra.Command {
	var opt sign.Options
	cmd := &cobra.Command{
		Use:   "sign OUTDIR --artifact-key REF [--db-key REF --db-cert REF]",
		Short: "Sign a build output: Secure Boot UKI, SHA256SUMS.sig, provenance",
		Long: `sign signs a build output directory (e.g. out/default) in place, as the final step
after build; the unsigned payload stays reproducible (manifest.json keeps its digests).

With --db-key/--db-cert, every .efi listed in SHA256SUMS (peerboot.efi) is signed for
UEFI Secure Boot with sbsign, and disk.img is rewritten around the signed UKI with the
same GUIDs and timestamps. Then SHA256SUMS is rewritten and signed with the artifact key
(ECDSA P-256 or Ed25519): SHA256SUMS.sig (base64, the form cosign verify-blob --key
accepts) and cosign.pub; provenance.intoto.jsonl holds an in-toto statement with SLSA
provenance in a DSSE envelope signed with the same key.

Key references: file:PATH or env:VAR (the variable holds PEM text). Encrypted PKCS#8
keys take their passphrase from $PEERBOOT_KEY_PASSPHRASE.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opt.Version = version
			opt.Log = cmd.OutOrStdout()
			if opt.ArtifactKey == "" {
				return exitcode.Tag(exitcode.Usage, errArtifactKey)
			}
			return sign.SignOutput(cmd.Context(), args[0], opt)
		},
	}
	cmd.Flags().StringVar(&opt.ArtifactKey, "artifact-key", "", "artifact signing key reference (ECDSA P-256 or Ed25519)")
	cmd.Flags().StringVar(&opt.DBKey, "db-key", "", "Secure Boot db key reference")
	cmd.Flags().StringVar(&opt.DBCert, "db-cert", "", "Secure Boot db certificate reference")
	return cmd
}
