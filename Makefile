# rox top-level targets. (The kernel build of rox.ko reads ./Kbuild, not this file.)
#   make setup    toolchain root + guest kernel into $(ROX_CACHE) (idempotent, cached)
#   make module   build rox.ko against the cached kernel
#   make provider build librox and install it into the root
#   make libfabric-xrc  libfabric 2.1.0 with rox's XRC fixes into the cache (once; t-provider-libfabric)
#   make quality  rustfmt + clippy (warnings denied, every unsafe block with // SAFETY:)
#   make test     everything: setup, module, host tests, guest tests (stage timings printed)
#   make demo     boot a guest (Debian's stock kernel: no kernel build) and show rox at work
#   make fuzz     every rox-nic fuzz target for FUZZ_SECONDS (default 300) each (nightly, cargo-fuzz)
ROX_CACHE ?= $(HOME)/.cache/rox
ROX_KERNEL_FLAVOUR ?= release
export ROX_CACHE ROX_KERNEL_FLAVOUR
# A host without cargo on PATH uses the toolchain root's (rustc 1.85; scripts/root-cargo/cargo).
CARGO ?= $(shell command -v cargo 2>/dev/null || echo scripts/root-cargo/cargo)

.PHONY: setup root kernel module provider libfabric-xrc device host-test guest-test quality test demo fuzz clean

setup: root kernel

root:
	scripts/setup-root.sh

kernel: root
	scripts/setup-kernel.sh $(ROX_KERNEL_FLAVOUR)

module:
	scripts/build-module.sh $(ROX_KERNEL_FLAVOUR)

provider: root
	scripts/build-provider.sh

libfabric-xrc: root
	scripts/build-libfabric-xrc.sh

host-test:
	$(CARGO) test --workspace

device:
	$(CARGO) build --release -p rox-nic -p rox-lab

guest-test: module provider libfabric-xrc device
	tests/guest/run $(ROX_KERNEL_FLAVOUR)

quality:
	scripts/quality.sh

test:
	scripts/test.sh

# make demo boots Debian's stock kernel (no kernel build) unless ROX_KERNEL_FLAVOUR is given.
ROX_DEMO_FLAVOUR := $(if $(filter file,$(origin ROX_KERNEL_FLAVOUR)),stock,$(ROX_KERNEL_FLAVOUR))
demo:
	ROX_KERNEL_FLAVOUR=$(ROX_DEMO_FLAVOUR) scripts/demo.sh

fuzz:
	qemu/rox-nic/fuzz/run.sh

# Debian's stock kernel (docs/kernel.md): `make stock` prepares it (no kernel build), then
# `make module demo ROX_KERNEL_FLAVOUR=stock`. `make check-kernel KDIR=...`: can rox.ko be built
# against and loaded into that kernel (tree, headers package or stock directory)?
.PHONY: stock check-kernel
stock: root
	scripts/setup-stock-kernel.sh

check-kernel:
	@test -n "$(KDIR)" || { echo "usage: make check-kernel KDIR=<kernel tree or headers>"; exit 2; }
	scripts/check-kernel $(KDIR)

clean:
	$(CARGO) clean
	rm -rf $(ROX_CACHE)/kernel-*/rox-module-*
