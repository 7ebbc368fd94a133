package main

import (
	"os"

	"github.com/peerboot/peerboot/netboot/optoken"
)

// envOperatorToken names the operator token's file when --operator-token does
// not, for serve (which creates it) and rollout (which reads it).
const envOperatorToken = "PEERBOOT_OPERATOR_TOKEN_FILE"

// defaultOperatorToken is where rollout looks without --operator-token.
func defaultOperatorToken(out string) string {
	if f := os.Getenv(envOperatorToken); f != "" {
		return f
	}
	return optoken.Default(out)
}
