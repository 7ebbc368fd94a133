package pcietest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The error names the kernel lists in each aer_dev_* file, in its order
// (drivers/pci/pcie/aer.c, aer_correctable_error_string and
// aer_uncorrectable_error_string).
var (
	aerCorrectable   = []string{"RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout", "NonFatalErr", "CorrIntErr", "HeaderOF"}
	aerUncorrectable = []string{"Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt", "UnxCmplt", "RxOF", "MalfTLP", "ECRC", "UnsupReq", "ACSViol", "UncorrIntErr", "BlockedTLP", "AtomicOpBlocked", "TLPBlockedErr", "PoisonTLPBlocked"}
)

// AER is one device's counts by the kernel's error names; a name not set is 0.
type AER struct {
	Correctable, NonFatal, Fatal map[string]int64
}

// WriteAER writes (or rewrites) the device's aer_dev_correctable, aer_dev_nonfatal
// and aer_dev_fatal under a tree Build made, as the kernel prints them: every
// error's count, then the total.
func WriteAER(dir, bdf string, a AER) error {
	dev := filepath.Join(dir, "sys", "bus", "pci", "devices", bdf)
	if _, err := os.Stat(dev); err != nil {
		return fmt.Errorf("pcietest: no device %s: %w", bdf, err)
	}
	for _, f := range []struct {
		file, total string
		names       []string
		counts      map[string]int64
	}{
		{"aer_dev_correctable", "TOTAL_ERR_COR", aerCorrectable, a.Correctable},
		{"aer_dev_nonfatal", "TOTAL_ERR_NONFATAL", aerUncorrectable, a.NonFatal},
		{"aer_dev_fatal", "TOTAL_ERR_FATAL", aerUncorrectable, a.Fatal},
	} {
		var b strings.Builder
		total := int64(0)
		for _, n := range f.names {
			fmt.Fprintf(&b, "%s %d\n", n, f.counts[n])
			total += f.counts[n]
		}
		fmt.Fprintf(&b, "%s %d\n", f.total, total)
		if err := os.WriteFile(filepath.Join(dev, f.file), []byte(b.String()), 0o444); err != nil {
			// A rewrite of a read-only file: make it writable first.
			if os.Chmod(filepath.Join(dev, f.file), 0o644) != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dev, f.file), []byte(b.String()), 0o444); err != nil {
				return err
			}
		}
	}
	return nil
}
