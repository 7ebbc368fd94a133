package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/sign"
)

func keysCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Manage signing keys (test key sets)",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "init DIR",
		Short: "Write a TEST key set (db, module, artifact, PCR keys): for testing only",
		Long: `keys init writes a fresh, unprotected TEST key set into DIR (created 0700; existing
files are never overwritten):

  db.key, db.crt                    RSA 2048 Secure Boot db key and self-signed certificate
  module.key, module.crt            RSA 2048 kernel module signing key and certificate
  artifact.key, cosign.pub          ECDSA P-256 artifact key (SHA256SUMS.sig, provenance)
  artifact-ed25519.key/.pub         Ed25519 artifact key (deterministic signatures)
  pcr.key, pcr.pub                  RSA 2048 PCR 11 policy key (sign.pcr_key: the UKI's .pcrsig/.pcrpkey)

Keys are PKCS#8 PEM, certificates and public keys PEM. They are for testing only.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			files, err := sign.InitTestKeys(args[0])
			if err != nil {
				return exitcode.Tag(exitcode.Usage, err)
			}
			w := cmd.OutOrStdout()
			fmt.Fprint(w, sign.TestKeysWarning+"\n")
			for _, f := range files {
				fmt.Fprintln(w, "  wrote", f)
			}
			fmt.Fprintln(cmd.ErrOrStderr(), "peerboot keys init: WARNING: these are TEST keys, NOT FOR PRODUCTION")
			return nil
		},
	})
	return cmd
}
