# Stands in for NVIDIA's top-level Makefile in Build's tests: `make modules`
# compiles testdata/module.c into each module of NV_KERNEL_MODULES with the
# kernel stage's release as vermagic, so Build's whole path (make, strip,
# checks) runs without a kernel. The test sets FAKE_* in fake.mk.

RELEASE := $(shell cat $(SYSOUT)/../release)
FAKE_NEEDS := printk
include fake.mk

modules:
	@echo 'KCFLAGS=$(KCFLAGS)' > make-args
	@echo 'OFA_DIR=$(OFA_DIR)' >> make-args
	@echo ' CONFTEST: pci_resize_resource_has_exclude_bars_arg'
	@for m in $(filter-out $(FAKE_SKIP),$(NV_KERNEL_MODULES)); do \
		echo "  CC [M]  $(CURDIR)/$$m.o"; \
		gcc -c -g -DVERMAGIC='"$(RELEASE) SMP mod_unload "' -DNEEDS=$(FAKE_NEEDS) \
			-o $$m.ko $(FAKE_TESTDATA)/module.c || exit 1; \
	done
	@if [ -n "$(FAKE_FAIL)" ]; then echo "$(FAKE_FAIL)" >&2; exit 2; fi
