package main

import "github.com/peerboot/peerboot/selftest/kmsg"

// kmsgLog reads /dev/kmsg through selftest/kmsg's watch (raw non-blocking fd, started at
// the end of the ring), so the first Drain returns only what happened since the init
// opened it.
type kmsgLog struct{ w *kmsg.Watch }

func openKmsg(path string) (*kmsgLog, error) {
	w, err := kmsg.Start(path)
	if err != nil {
		return nil, err
	}
	return &kmsgLog{w: w}, nil
}

// Drain returns what is there; a read error ends this drain only (the loads go on, and
// the lines read before it are kept).
func (k *kmsgLog) Drain() []string {
	msgs, _ := k.w.Messages()
	return msgs
}

// noKmsg stands in when /dev/kmsg cannot be opened: loads still happen, unlogged.
type noKmsg struct{}

func (noKmsg) Drain() []string { return []string{} }
