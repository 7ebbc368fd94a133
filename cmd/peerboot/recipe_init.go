package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/internal/didyoumean"
	"github.com/peerboot/peerboot/internal/fsutil"
	"github.com/peerboot/peerboot/recipe"
)

// platformInit is what `recipe init` asks for; the rest of the scaffold is
// comments saying what to measure and where it goes.
type platformInit struct {
	Name, Driver, CPU, GPUModel, VRAM, BAR1 string
	Sockets, GPUs, NUMANodes                int
	Thresholds                              string // a shared/ include, or ""
	IOMMU                                   string // the vendor's IOMMU switch for the cmdline
	GPUNUMA                                 string
}

// CPUName is the vendor as a description says it.
func (p platformInit) CPUName() string {
	switch p.CPU {
	case "amd":
		return "AMD"
	case "intel":
		return "Intel"
	}
	return "any CPU"
}

var platformTemplate = template.Must(template.New("platform").Parse(`# Platform {{.Name}}: say what the box is — CPUs, GPUs (VRAM, BAR1 as the BIOS
# sizes it), how the GPUs attach (root ports, PCIe switches, which socket) and what
# the BIOS sets (Above 4G decoding, ReBAR, ACS). Written by ` + "`peerboot recipe init`" + `;
# check every value against the box (lspci -vv, nvidia-smi -q) before locking it.
include = ["drivers/{{.Driver}}.toml"{{if .Thresholds}}, "{{.Thresholds}}"{{end}}]
name = "{{.Name}}"
description = "{{.CPUName}}, {{.GPUs}}x {{.GPUModel}}"

[platform]
cpu_vendor = "{{.CPU}}"
sockets = {{.Sockets}}
gpus = {{.GPUs}}
gpu_model = "{{.GPUModel}}"
# Per GPU, as nvidia-smi --query-gpu=memory.total,bar1.total reports them.
vram = "{{.VRAM}}"
bar1 = "{{.BAR1}}"
numa_nodes = {{.NUMANodes}}
# The NUMA node of each GPU in sysfs bus order (cat /sys/bus/pci/devices/*/numa_node).
gpu_numa = [{{.GPUNUMA}}]

[kernel]
# {{if .IOMMU}}The IOMMU on, in passthrough for the host; {{end}}the serial console (the BMC's
# serial-over-LAN) last, so that it is /dev/console.
cmdline = "console=tty0 console=ttyS0,115200 {{if .IOMMU}}{{.IOMMU}} iommu=pt {{end}}panic=-1"

[selftest]
copy_size = "256MiB"
nccl_max = "1GiB"
# NCCL bus bandwidth needed at nccl_max: set it between what NCCL over SHM gives on
# this box (P2P off) and what the P2P ring gives, once both are measured. 0: unchecked.
min_busbw_gbps = 0.0
{{- if not .Thresholds}}
# Per-pair floors by topology class (PIX, PXB, PHB, NODE, SYS): see
# recipes/shared/pcie4-4090-thresholds.toml for how they are chosen.
# [selftest.thresholds.NODE]
# min_unidir_gbps = 18.0
# min_bidir_gbps = 32.0
# max_latency_us = 5.0
{{- end}}

[boot]
on_pass = "shell"
on_fail = "shell"
`))

func recipeInitCmd() *cobra.Command {
	p := platformInit{}
	var dir string
	var force bool
	cmd := &cobra.Command{
		Use:   "init --platform NAME [--driver FLAVOUR] [--cpu intel|amd] [--gpus N] ...",
		Short: "Write a commented platform recipe to start a new box from",
		Long: `init writes DIR/NAME.toml (DIR: the first $PEERBOOT_RECIPES directory, else recipes):
a platform recipe that includes a driver flavour (DIR/drivers/FLAVOUR.toml) and, for
RTX 4090s, the shared PCIe Gen4 thresholds, with the platform's facts from the flags and
comments saying what to measure. The file is checked as ` + "`recipe validate`" + ` checks it before
it is written; an existing file is kept unless --force. Next: ` + "`peerboot lock DIR/NAME.toml`" + `.`,
		Args: maxArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			usage := func(format string, a ...any) error { return exitcode.Tag(exitcode.Usage, fmt.Errorf(format, a...)) }
			if p.Name == "" {
				return usage("recipe init: --platform NAME is required")
			}
			if !recipe.IsName(p.Name) || strings.ContainsAny(p.Name, " /") {
				return usage("--platform: want a name such as epyc-8gpu, got %q", p.Name)
			}
			switch p.CPU {
			case "amd":
				p.IOMMU = "amd_iommu=on"
			case "intel":
				p.IOMMU = "intel_iommu=on"
			case "any":
			default:
				return usage("--cpu: want intel, amd or any, got %q", p.CPU)
			}
			// The model is written into TOML strings as given: a quote, a backslash or a
			// control character would end the string early or escape out of it.
			if p.GPUModel == "" || strings.ContainsFunc(p.GPUModel, func(r rune) bool { return r == '"' || r == '\\' || unicode.IsControl(r) }) {
				return usage("--gpu-model: want a model name such as \"RTX 4090\", got %q", p.GPUModel)
			}
			if p.GPUs < 1 || p.GPUs > 16 {
				return usage("--gpus: want 1..16, got %d", p.GPUs)
			}
			if dir == "" {
				dir = recipeDirs()[0]
			}
			flavours, _ := recipe.List(filepath.Join(dir, "drivers"))
			if _, err := os.Stat(filepath.Join(dir, "drivers", p.Driver+".toml")); err != nil {
				msg := fmt.Sprintf("--driver: no driver flavour %s in %s", p.Driver, filepath.Join(dir, "drivers"))
				if s := didyoumean.Closest(p.Driver, flavours); s != "" {
					msg += fmt.Sprintf(" (did you mean %s?)", s)
				} else if len(flavours) > 0 {
					msg += "; there are " + strings.Join(flavours, ", ")
				}
				return exitcode.Tag(exitcode.Usage, errors.New(msg))
			}
			if p.GPUModel == "RTX 4090" {
				if _, err := os.Stat(filepath.Join(dir, "shared", "pcie4-4090-thresholds.toml")); err == nil {
					p.Thresholds = "shared/pcie4-4090-thresholds.toml"
				}
			}
			numa := make([]string, p.GPUs)
			for i := range numa {
				numa[i] = "0"
			}
			p.GPUNUMA = strings.Join(numa, ", ")
			var buf bytes.Buffer
			if err := platformTemplate.Execute(&buf, p); err != nil {
				return err
			}
			path := filepath.Join(dir, p.Name+".toml")
			if _, err := os.Stat(path); err == nil && !force {
				return usage("recipe init: %s exists (--force replaces it)", path)
			}
			// Checked under its temporary name beside path, so its includes resolve
			// and nothing is left behind when it does not validate.
			var invalid error
			err := fsutil.WriteAtomic(path, 0o644, func(f *os.File) error {
				if _, err := f.Write(buf.Bytes()); err != nil {
					return err
				}
				if _, err := validRecipe(f.Name()); err != nil {
					invalid = initFlagsInvalid(err)
					return invalid
				}
				return nil
			})
			if invalid != nil {
				return invalid
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\nnext: edit it against the box, then `peerboot recipe validate %s` and `peerboot lock %s`\n", path, path, path)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.Name, "platform", "", "the platform's name: the recipe is DIR/NAME.toml and the image is called NAME")
	f.StringVar(&p.Driver, "driver", "550.163.01-p2p", "driver flavour: a DIR/drivers/*.toml without .toml")
	f.StringVar(&p.CPU, "cpu", "amd", "CPU vendor: intel, amd or any (sets the IOMMU argument)")
	f.IntVar(&p.Sockets, "sockets", 1, "CPU sockets")
	f.IntVar(&p.GPUs, "gpus", 4, "NVIDIA GPUs in the box")
	f.StringVar(&p.GPUModel, "gpu-model", "RTX 4090", "GPU model as the report names it")
	f.StringVar(&p.VRAM, "vram", "49140MiB", "VRAM per GPU")
	f.StringVar(&p.BAR1, "bar1", "32GiB", "BAR1 per GPU, as the BIOS sizes it")
	f.IntVar(&p.NUMANodes, "numa-nodes", 1, "NUMA nodes of the box")
	f.StringVar(&dir, "dir", "", "directory to write the recipe in (default: the first $PEERBOOT_RECIPES directory, else recipes)")
	f.BoolVar(&force, "force", false, "replace an existing recipe")
	return cmd
}

func recipeValidateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "validate [RECIPE...]",
		Short: "Check recipes without building: every problem of each, exit 0 or 3",
		Long: `validate loads each RECIPE (a path or a name; default: every recipe of recipes/ and
$PEERBOOT_RECIPES) as lock, plan and build do — includes, types, keys, values, and the
patch, fragment and key files it names — and prints every problem at once, file:line
first. It reads no lock and no network. Exit 0 when all are valid, 3 when one is not.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			paths := args
			if len(paths) == 0 {
				for _, d := range recipeDirs() {
					found, _ := filepath.Glob(filepath.Join(d, "*.toml"))
					paths = append(paths, found...)
				}
				if len(paths) == 0 {
					return exitcode.Tag(exitcode.Recipe, fmt.Errorf("recipe validate: no recipes in %s: name them, or set PEERBOOT_RECIPES", strings.Join(recipeDirs(), ", ")))
				}
			}
			bad := 0
			for _, p := range paths {
				r, err := validRecipe(p)
				if err != nil {
					printError(cmd.ErrOrStderr(), err)
					bad++
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (%s, %s)\n", r.Path, r.Name, r.Digest)
			}
			if bad > 0 {
				return exitcode.Tag(exitcode.Recipe, fmt.Errorf("recipe validate: %d of %d recipes have problems (above)", bad, len(paths)))
			}
			return nil
		},
	}
	return cmd
}

// initFlags are the recipe keys recipe init sets from a flag's value as given.
var initFlags = map[string]string{
	"platform.vram": "--vram", "platform.bar1": "--bar1", "platform.gpu_model": "--gpu-model",
	"platform.sockets": "--sockets", "platform.numa_nodes": "--numa-nodes",
}

// initFlagsInvalid words a scaffold that does not validate: a flag's value the
// recipe refuses is a usage error naming the flag (not the line of a temporary
// file that is gone by then; the problems that follow from it are left out);
// anything else is the template's fault.
func initFlagsInvalid(err error) error {
	var res recipe.Errors
	if errors.As(err, &res) {
		var bad []string
		for _, e := range res {
			if flag, ok := initFlags[e.Key]; ok {
				bad = append(bad, flag+": "+e.Msg)
			}
		}
		if len(bad) > 0 {
			return exitcode.Tag(exitcode.Usage, fmt.Errorf("recipe init: %s", strings.Join(bad, "; ")))
		}
	}
	return fmt.Errorf("recipe init: the scaffold does not validate: %w", err)
}
