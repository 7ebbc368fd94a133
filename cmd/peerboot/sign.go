package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/sign"
)

func signCmd() *cobra.Command {
	var opt sign.Options
	var asJSON bool
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

Key references: a path, file:PATH or env:VAR (the variable holds PEM text), as verify
takes them. Encrypted PKCS#8 keys take their passphrase from $PEERBOOT_KEY_PASSPHRASE.
A key that cannot be read or parsed, --db-key without --db-cert, or an OUTDIR that is
not a build output exits 2; an output whose files no longer match SHA256SUMS exits 6.
Nothing is written then.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opt.Version = version
			opt.Log = cmd.OutOrStdout()
			if opt.ArtifactKey == "" {
				return exitcode.Tag(exitcode.Usage, errArtifactKey)
			}
			if (opt.DBKey == "") != (opt.DBCert == "") {
				return exitcode.Tag(exitcode.Usage, errors.New("give both --db-key and --db-cert, or neither"))
			}
			if err := outDirArg(args[0]); err != nil {
				return err
			}
			// The keys are read before anything is written, so a wrong reference is a
			// usage error that leaves OUTDIR as it was.
			opt.ArtifactKey, opt.DBKey, opt.DBCert = keyRefArg(opt.ArtifactKey), keyRefArg(opt.DBKey), keyRefArg(opt.DBCert)
			if _, err := sign.LoadSigner(opt.ArtifactKey); err != nil {
				return exitcode.Tag(exitcode.Usage, fmt.Errorf("--artifact-key: %w", err))
			}
			if opt.DBKey != "" {
				if _, err := sign.LoadSigner(opt.DBKey); err != nil {
					return exitcode.Tag(exitcode.Usage, fmt.Errorf("--db-key: %w", err))
				}
			}
			if opt.DBCert != "" {
				if _, err := sign.LoadCert(opt.DBCert); err != nil {
					return exitcode.Tag(exitcode.Usage, fmt.Errorf("--db-cert: %w", err))
				}
			}
			var log bytes.Buffer
			if asJSON {
				opt.Log = &log
			}
			if err := sign.SignOutput(cmd.Context(), args[0], opt); err != nil {
				return err
			}
			if asJSON {
				j := signJSON{Dir: args[0], Steps: []string{}}
				for _, l := range strings.Split(strings.TrimSpace(log.String()), "\n") {
					if l != "" {
						j.Steps = append(j.Steps, l)
					}
				}
				return writeJSON(cmd.OutOrStdout(), j)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&opt.ArtifactKey, "artifact-key", "", "artifact signing key (ECDSA P-256 or Ed25519): a path, file:PATH or env:VAR")
	cmd.Flags().StringVar(&opt.DBKey, "db-key", "", "Secure Boot db key: a path, file:PATH or env:VAR")
	cmd.Flags().StringVar(&opt.DBCert, "db-cert", "", "Secure Boot db certificate: a path, file:PATH or env:VAR")
	addJSONFlag(cmd, &asJSON)
	return cmd
}

// keyRefArg turns a key given on the command line into a reference: file:PATH and
// env:VAR stay as they are, anything else is a path (as verify --key takes it).
func keyRefArg(ref string) string {
	if ref == "" || strings.HasPrefix(ref, "file:") || strings.HasPrefix(ref, "env:") {
		return ref
	}
	return "file:" + ref
}

// outDirArg refuses an OUTDIR argument that is not a directory, as a usage error
// naming it, before a command reads what it expects inside.
func outDirArg(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return exitcode.Tag(exitcode.Usage, fmt.Errorf("%s: no such build output directory (peerboot build writes out/RECIPE)", dir))
	case !fi.IsDir():
		return exitcode.Tag(exitcode.Usage, fmt.Errorf("%s: not a directory: want a build output directory such as out/default", dir))
	}
	return nil
}

// signJSON is `peerboot sign --json`: what signing did, one line a step, as the
// text output says it.
type signJSON struct {
	Dir   string   `json:"dir"`
	Steps []string `json:"steps"`
}
