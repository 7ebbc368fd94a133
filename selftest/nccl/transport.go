package nccl

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/peerboot/peerboot/selftest"
)

// transportLine matches the line NCCL logs (NCCL_DEBUG=INFO, subsystems INIT, P2P, SHM,
// NET) for each channel connection it sets up, in the shapes seen across versions:
//
//	host:1234:1240 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer
//	host:1234:1240 [0] NCCL INFO Channel 01/0 : 1[1] -> 0[0] via P2P/direct pointer/read
//	host:1234:1240 [2] NCCL INFO Channel 00/0 : 0[2] -> 1[3] via SHM/direct/direct
//	host:1234:1240 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via P2P/CUMEM/read
//	host:1234:1240 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/Socket/0
//	host:1234:1240 [0] NCCL INFO Ring 00 : 0[0] -> 1[1] via P2P/IPC           (old releases)
//
// The "/0" after the channel is NCCL's connection index and the bracketed number names
// the rank's device (its form varies between releases); the report keeps neither.
// The ring listing "Channel 00/02 :    0   1   2   3" has no arrow and does not match.
var transportLine = regexp.MustCompile(`\b(?:Channel|Ring) (\d{1,4})(?:/\d{1,4})? : (\d{1,6})\[[^\]\s]*\] -> (\d{1,6})\[[^\]\s]*\](?: \[(?:send|receive)\])? via (\S.*)$`)

// transportMaxLine bounds one log line. NCCL's own lines are far shorter; a longer one
// is someone else's output in the same file and is skipped, not an error.
const transportMaxLine = 64 << 10

// ParseTransports reads NCCL_DEBUG=INFO output and returns one Transport per distinct
// (channel, from rank, to rank, via) connection, in the order they first appear. Lines
// that are not connection lines are ignored, so the whole log (or a console capture
// with other programs' output mixed in) can be passed as it is. The error is only ever
// a read error; the transports parsed up to it are returned with it.
func ParseTransports(r io.Reader) ([]selftest.Transport, error) {
	out := []selftest.Transport{}
	seen := map[selftest.Transport]bool{}
	br := bufio.NewReaderSize(r, 4096)
	for {
		line, err := readTransportLine(br)
		if t, ok := parseTransportLine(line); ok && !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("reading the NCCL log: %w", err)
		}
	}
}

// readTransportLine returns the next line without its line ending. A line longer than
// transportMaxLine comes back empty (it is read through and dropped).
func readTransportLine(br *bufio.Reader) (string, error) {
	var b []byte
	tooLong := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(b)+len(chunk) > transportMaxLine {
				tooLong, b = true, nil
			} else {
				b = append(b, chunk...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return strings.TrimRight(string(b), "\r\n"), err
	}
}

// parseTransportLine decodes one connection line.
func parseTransportLine(line string) (selftest.Transport, bool) {
	if !strings.Contains(line, " via ") {
		return selftest.Transport{}, false // the cheap test first: most lines are not ours
	}
	m := transportLine.FindStringSubmatch(line)
	if m == nil {
		return selftest.Transport{}, false
	}
	ch, err1 := strconv.Atoi(m[1])
	from, err2 := strconv.Atoi(m[2])
	to, err3 := strconv.Atoi(m[3])
	via := strings.TrimSpace(m[4])
	if err1 != nil || err2 != nil || err3 != nil || via == "" {
		return selftest.Transport{}, false
	}
	return selftest.Transport{Channel: ch, From: from, To: to, Via: via, P2P: strings.HasPrefix(via, "P2P/")}, true
}

// Summarize counts P2P and other connections and describes the first connection that
// is not P2P in NCCL's own words ("Channel 00 : 0 -> 1 via SHM/direct/direct"), or ""
// when every connection is P2P. Between GPUs of one box any non-P2P connection (SHM:
// staged through host memory; NET: through a NIC or socket) means the unlock did not
// take effect, which is why the first one is worth quoting in a finding.
func Summarize(ts []selftest.Transport) (p2p, nonP2P int, firstNonP2P string) {
	for _, t := range ts {
		if t.P2P {
			p2p++
			continue
		}
		if nonP2P == 0 {
			firstNonP2P = fmt.Sprintf("Channel %02d : %d -> %d via %s", t.Channel, t.From, t.To, t.Via)
		}
		nonP2P++
	}
	return p2p, nonP2P, firstNonP2P
}
