package main

import "testing"

func TestParseKmsgRecord(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"6,1234,5678901,-;NVRM: No NVIDIA GPU found.\n", "NVRM: No NVIDIA GPU found.", true},
		{"4,99,1,-,caller=T1;nvidia: Unknown symbol drm_open (err -2)\n SUBSYSTEM=module\n", "nvidia: Unknown symbol drm_open (err -2)", true},
		{"3,1,2,c;a;b", "a;b", true},
		{"no header", "", false},
		{";x", "", false},
	}
	for _, tt := range tests {
		got, ok := parseKmsgRecord(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseKmsgRecord(%q) = %q, %v", tt.in, got, ok)
		}
	}
}

func FuzzParseKmsgRecord(f *testing.F) {
	f.Add("6,1234,5678901,-;NVRM: loading\n SUBSYSTEM=pci\n")
	f.Fuzz(func(t *testing.T, s string) {
		msg, ok := parseKmsgRecord(s)
		if !ok && msg != "" {
			t.Fatal("message without ok")
		}
		if len(msg) > len(s) {
			t.Fatal("message longer than record")
		}
	})
}
