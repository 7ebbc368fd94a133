package main

import (
	"crypto"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/build"
	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/sign"
	"github.com/peerboot/peerboot/sign/keyref"
	"github.com/peerboot/peerboot/stagecache"
)

// Environment variables naming the remote stage cache (docs/environment.md).
const (
	envCacheFrom = "PEERBOOT_CACHE_FROM"
	envCacheTo   = "PEERBOOT_CACHE_TO"
)

// cacheFlags are the remote stage cache's flags (docs/remote-cache.md).
type cacheFlags struct {
	from, to    string
	keys        []string
	artifactKey string
	strict      bool
}

// addFrom adds what reading the cache takes; addTo what pushing takes.
func (f *cacheFlags) addFrom(cmd *cobra.Command, withKeys bool) {
	cmd.Flags().StringVar(&f.from, "cache-from", "", "registry repository (oci://REGISTRY/REPO) to fetch a stage the store lacks from, before building it (default $"+envCacheFrom+", else the recipe's cache.from)")
	if withKeys {
		cmd.Flags().StringArrayVar(&f.keys, "cache-key", nil, "public key (path, file:PATH or env:VAR) a fetched stage may be signed with, besides the recipe's cache.keys and the artifact key's own (repeatable)")
		cmd.Flags().BoolVar(&f.strict, "cache-strict", false, "fail (exit 6) when a fetched stage is refused (unsigned, signed by another key, altered) instead of building it locally")
	}
}

func (f *cacheFlags) addTo(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.to, "cache-to", "", "registry repository (oci://REGISTRY/REPO) to push every stage the store holds to, signed with the artifact key (default $"+envCacheTo+", else the recipe's cache.to)")
	cmd.Flags().StringVar(&f.artifactKey, "artifact-key", "", "private key (path, file:PATH or env:VAR) that signs pushed stages (default: the recipe's sign.artifact_key)")
}

// refs are the repositories: the flag, else the environment, else the recipe.
func (f *cacheFlags) refs(r *recipe.Resolved) (from, to string) {
	pick := func(flag, env, rec string) string {
		if flag != "" {
			return flag
		}
		if v := os.Getenv(env); v != "" {
			return v
		}
		return rec
	}
	return pick(f.from, envCacheFrom, r.Cache.From), pick(f.to, envCacheTo, r.Cache.To)
}

// open makes the caches the flags, environment and recipe name. A push
// needs the artifact key; a fetch needs a key to trust (the artifact key's
// own, cache.keys, --cache-key): nothing is taken from a registry unsigned.
func (f *cacheFlags) open(r *recipe.Resolved, log io.Writer) (build.Remote, error) {
	from, to := f.refs(r)
	rem := build.Remote{Strict: f.strict}
	if from == "" && to == "" {
		return rem, nil
	}
	dir := filepath.Dir(r.Path)
	var signer crypto.Signer
	if ref := keyRefArg(f.artifactKey); ref != "" || r.Sign.ArtifactKey != "" {
		what := "--artifact-key"
		if ref == "" {
			ref, what = keyref.Resolve(r.Sign.ArtifactKey, dir), r.KeyLocation("sign.artifact_key")+": sign.artifact_key"
		}
		var err error
		if signer, err = sign.LoadSigner(ref); err != nil {
			return rem, exitcode.Tag(exitcode.Usage, fmt.Errorf("%s: %w", what, err))
		}
	}
	var trust []crypto.PublicKey
	if signer != nil {
		trust = append(trust, signer.Public())
	}
	for _, k := range f.keys {
		pub, err := sign.LoadPublicKey(keyRefArg(k))
		if err != nil {
			return rem, exitcode.Tag(exitcode.Usage, fmt.Errorf("--cache-key: %w", err))
		}
		trust = append(trust, pub)
	}
	for i, k := range r.Cache.Keys {
		pub, err := sign.LoadPublicKey(keyref.Resolve(k, dir))
		if err != nil {
			return rem, exitcode.Tag(exitcode.Usage, fmt.Errorf("%s: cache.keys[%d]: %w", r.KeyLocation("cache.keys"), i, err))
		}
		trust = append(trust, pub)
	}
	opt := stagecache.Options{Signer: signer, Trust: trust, Log: log}
	var err error
	if from != "" {
		if len(trust) == 0 {
			return rem, exitcode.Tag(exitcode.Usage, fmt.Errorf("fetching stages from %s needs a key to verify them with: --cache-key, the recipe's cache.keys, or sign.artifact_key (whose own key is trusted)", from))
		}
		if rem.From, err = stagecache.Open(from, opt); err != nil {
			return rem, exitcode.Tag(exitcode.Usage, fmt.Errorf("--cache-from: %w", err))
		}
	}
	if to != "" {
		if signer == nil {
			return rem, exitcode.Tag(exitcode.Usage, fmt.Errorf("pushing stages to %s needs the artifact key to sign them with: --artifact-key or the recipe's sign.artifact_key", to))
		}
		if rem.To, err = stagecache.Open(to, opt); err != nil {
			return rem, exitcode.Tag(exitcode.Usage, fmt.Errorf("--cache-to: %w", err))
		}
	}
	return rem, nil
}

// cacheJSON is the remote cache's part of `build --json` and `store push --json`.
type cacheJSON struct {
	From        string           `json:"from"`
	To          string           `json:"to"`
	LocalHits   int              `json:"local_hits"`  // stages the store had
	RemoteHits  int              `json:"remote_hits"` // stages fetched from From
	Built       int              `json:"built"`
	Pushed      int              `json:"pushed"` // stages sent to To (not there before)
	PulledBytes int64            `json:"pulled_bytes"`
	PushedBytes int64            `json:"pushed_bytes"`
	Refused     []cacheIssueJSON `json:"refused"`     // fetched and refused: built locally
	PushErrors  []cacheIssueJSON `json:"push_errors"` // not pushed
}

type cacheIssueJSON struct {
	Stage  string `json:"stage"`
	Reason string `json:"reason"`
}

func newCacheJSON(rem build.Remote, outs []build.Outcome) *cacheJSON {
	j := &cacheJSON{Refused: []cacheIssueJSON{}, PushErrors: []cacheIssueJSON{}}
	if rem.From != nil {
		j.From = rem.From.Ref
	}
	if rem.To != nil {
		j.To = rem.To.Ref
	}
	for _, o := range outs {
		switch {
		case o.Stage == "publish" || o.Unneeded:
		case o.Pulled:
			j.RemoteHits++
		case o.Cached:
			j.LocalHits++
		default:
			j.Built++
		}
		j.PulledBytes += o.PulledBytes
		j.PushedBytes += o.PushedBytes
		if o.Pushed {
			j.Pushed++
		}
		if o.Refused != "" {
			j.Refused = append(j.Refused, cacheIssueJSON{o.Stage, o.Refused})
		}
		if o.PushError != "" {
			j.PushErrors = append(j.PushErrors, cacheIssueJSON{o.Stage, o.PushError})
		}
	}
	return j
}
