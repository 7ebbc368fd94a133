package main

// envOperatorToken names the operator token's file when --operator-token does
// not, for serve (which creates it) and rollout (which reads it); without
// either, both use netboot/optoken's default under the output root.
const envOperatorToken = "PEERBOOT_OPERATOR_TOKEN_FILE"
