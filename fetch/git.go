package fetch

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/store"
)

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "LC_ALL=C")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

func hasCommit(ctx context.Context, st *store.Store, in lock.Input) (bool, error) {
	dir := st.GitDir(in.URL)
	if _, err := os.Stat(dir); err != nil {
		return false, nil
	}
	// cat-file -e fails for a missing object; git checks object hashes as it reads.
	_, err := git(ctx, dir, "cat-file", "-e", in.Commit+"^{commit}")
	return err == nil, nil
}

// fetchGit fetches exactly the pinned commit, from a mirror if one is mapped.
func fetchGit(ctx context.Context, st *store.Store, in lock.Input, opt Options) error {
	unlock, err := st.Lock("git-" + filepath.Base(st.GitDir(in.URL)))
	if err != nil {
		return err
	}
	defer unlock()
	dir := st.GitDir(in.URL)
	if _, err := os.Stat(dir); err != nil {
		if _, err := git(ctx, filepath.Dir(dir), "init", "--bare", "--quiet", dir); err != nil {
			return err
		}
	}
	from := in.URL
	if m, ok := opt.GitMirrors[in.URL]; ok {
		from = m
		logf(opt.Log, "git %s: using mirror %s", in.URL, m)
	}
	if _, err := git(ctx, dir, "fetch", "--quiet", "--no-tags", from, in.Commit); err != nil {
		return fmt.Errorf("fetching commit %s: %w", in.Commit, err)
	}
	got, err := git(ctx, dir, "rev-parse", "--verify", in.Commit+"^{commit}")
	if err != nil {
		return err
	}
	if got != in.Commit {
		return fmt.Errorf("git %s: want commit %s, got %s", in.URL, in.Commit, got)
	}
	_, err = git(ctx, dir, "update-ref", "refs/peerboot/"+in.Commit, in.Commit)
	return err
}
