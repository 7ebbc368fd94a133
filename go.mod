module github.com/peerboot/peerboot

go 1.26.8

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/ProtonMail/go-crypto v1.5.2
	github.com/bluekeyes/go-gitdiff v0.9.0
	github.com/ebitengine/purego v0.11.3
	github.com/klauspost/compress v1.20.4
	github.com/spf13/cobra v1.10.2
	github.com/ulikunitz/xz v0.5.17
	golang.org/x/sys v0.50.0
	golang.org/x/term v0.48.0
	pault.ag/go/debian v0.19.0
)

require (
	github.com/cloudflare/circl v1.6.3 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	golang.org/x/crypto v0.41.0 // indirect
)
