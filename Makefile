# The two commands of the README: `make demo` and `make test`. Both install what is
# missing first (apt-get), then build.
SWIFT ?= swift
BUILD_FLAGS ?=
BIN = .build/debug/containerfs
RELEASE_BIN = .build/release/containerfs
PREFIX ?= /usr/local

.PHONY: deps build release test demo bench install clean

deps:
	@scripts/install-deps.sh

build: deps
	$(SWIFT) build $(BUILD_FLAGS)

release: deps
	$(SWIFT) build -c release $(BUILD_FLAGS)

# Every test: the pure policy, the store, and real mounts driven by real programs.
test: build
	SWIFT=$(SWIFT) scripts/run-tests.sh $(BUILD_FLAGS)

demo: release
	scripts/demo.sh $(RELEASE_BIN)

bench: release
	scripts/install-deps.sh --bench
	bench/run.sh $(RELEASE_BIN)

# The helper goes where mount(8) looks for mount.TYPE: /sbin (on a merged-/usr system, /usr/sbin).
# mount.fuse.containerfs serves the FUSE convention's type name, fuse.containerfs.
install: release
	install -D -m 0755 $(RELEASE_BIN) $(DESTDIR)$(PREFIX)/bin/containerfs
	install -D -m 0755 mount-helper/mount.containerfs $(DESTDIR)/sbin/mount.containerfs
	ln -sf mount.containerfs $(DESTDIR)/sbin/mount.fuse.containerfs

clean:
	rm -rf .build
