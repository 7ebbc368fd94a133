package apt

import "errors"

// Kind says why loading a repository failed, so a caller can tell the user's
// mistake (a keyring the recipe names but that cannot be read) from tampering
// (a bad signature, an index that does not match InRelease) and from the
// network (everything else).
type Kind int

const (
	KindNetwork   Kind = iota // unreachable, refused, an HTTP error
	KindKeyring               // the keyring is missing, unreadable or empty
	KindIntegrity             // a signature or hash did not verify
)

type kindError struct {
	kind Kind
	err  error
}

func (e *kindError) Error() string { return e.err.Error() }
func (e *kindError) Unwrap() error { return e.err }

func withKind(k Kind, err error) error {
	if err == nil {
		return nil
	}
	return &kindError{kind: k, err: err}
}

// KindOf is the kind of a LoadIndex error; KindNetwork when none was marked.
func KindOf(err error) Kind {
	var ke *kindError
	if errors.As(err, &ke) {
		return ke.kind
	}
	return KindNetwork
}
