#!/bin/bash
# The full test suite on a fresh Debian/Ubuntu machine: installs the system tools
# the tests check rendered files with (as root), installs the locked npm
# dependencies, then runs `npm test`. Without root the tools must already be
# there; tests that need root or a missing tool say so and skip (under CI=true
# a missing tool fails instead).
set -euo pipefail
cd "$(dirname "$0")/.."

readonly PACKAGES=(
	openssh-server openssh-client # sshd -t/-T and the e2e sshd; ssh client
	shellcheck                    # every rendered script
	cloud-init                    # cloud-init schema on every user_data
	systemd                       # systemd-analyze verify on every unit
	iproute2                      # network namespaces for the e2e tests
	procps passwd util-linux      # pkill, useradd, mount (e2e)
	docker.io docker-compose      # the real engine runs the rendered compose; units exec them
	nftables                      # nft --check on the rendered egress rules
	busybox-static                # the test images' userland
	restic postgresql             # backup and restore drill for real
	openssl                       # the GitHub token minter signs the App JWT with it
	sudo e2fsprogs                # secrets push through the operator's sudo; the runtime's state filesystem
	systemd-container mmdebstrap  # the sandbox's units booted under systemd-nspawn (boot order)
	ssh-audit                     # the rendered sshd and ssh configs offer no weak algorithm
	bubblewrap jq                 # the drill's confinement; its snapshot lists; the README's CI line
	python3 pyflakes3 socat       # the broker, the audit tool, the secrets and token tools (python3), their lint; the broker client
	python3-pip                   # the Hermes image's wheels, downloaded by hash (twin/images.ts)
	dnsmasq-base bind9-dnsutils   # the fake upstream resolvers in front of the real AdGuard Home; dig
	tcpdump                       # the gateway's DNS capture, run as rendered (e2e-dns)
	isc-dhcp-client               # dhclient-script, as the hosts run it, against the rendered hook that keeps resolv.conf
	golang-go                     # AdGuard Home and rest-server built from their Go modules (twin/gotools.ts) where no Go is installed
	pre-commit git                # the pre-commit hook, run by the real pre-commit; git in the checkpoint tests' shell image
	zip rsync                     # the destructive-command list: which abbreviated options the real tools take
	btrfs-progs e2fsprogs         # checkpoints: btrfs on a loop device, ext4 for the migration path
	gcc libc6-dev                 # checkpoints: the agent's raw btrfs ioctls (a static probe) against the seccomp profile
	rootlesskit slirp4netns uidmap # the gateway's real rootless dockerd (rootless port publishing)
	fdisk qemu-utils              # the twin's base image: its partition table (sfdisk), qcow2 (qemu-img)
	apt-utils gnupg curl          # the twin's apt mirror: apt-ftparchive, its signing key, the TLS test client
	debian-archive-keyring        # the mirror verifies what it downloads from Debian
	wireguard-tools wireguard-go iputils-ping # the twin's Tailscale stand-in: wg, userspace WireGuard where the kernel has none, ping over tailscale0
	qemu-system-x86 nftables     # the twin: its guests (TCG), the hcloud Firewall stand-in
	buildah skopeo                # the twin's images: Dockerfiles built without a Docker engine, pushed by digest
	docker-registry curl          # the twin's registry (distribution); its manifests fetched over TLS
)

if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null; then
	missing=()
	for package in "${PACKAGES[@]}"; do
		dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
	done
	if ((${#missing[@]} > 0)); then
		echo "test/run.sh: installing ${missing[*]}"
		# shellcheck source=test/apt-lock.sh disable=SC1091 # followed when linted with test/apt-lock.sh
		source test/apt-lock.sh
		wait_for_apt_locks 600
		apt-get update -qq
		wait_for_apt_locks 600
		# The lock can be taken again between the wait and apt-get: apt-get waits for it too.
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 "${missing[@]}" >/dev/null
	fi
fi

if [[ ! -d node_modules || "${CI:-}" == "true" ]]; then
	npm ci --no-audit --no-fund
fi

mkdir -p out
rm -f out/test-results.json out/test-results-twin.json
npm run -s typecheck
# Built once here: both test processes below find dist/ fresh and leave it alone.
npm run -s build

# The twin's acceptance suite (test/e2e-twin.test.ts, mostly its QEMU guests' own time)
# runs in a vitest process of its own, its log after the rest's. Its guests boot first
# with the machine to themselves: beside the whole suite their first boot outgrew an hour
# (the gateway's packages, then the agent runtime's image and start-up, all emulated).
# The rest starts once both guests run their workloads (or the twin's process ended) and
# runs beside the twin's tests, one file at a time as on any 2-core machine.
readonly TWIN_SUITE=test/e2e-twin.test.ts
readonly TWIN_STATE=/run/airlock-twin/e2e/state.json
AIRLOCK_TWIN_BESIDE_SUITE=1 npx vitest run "$TWIN_SUITE" --reporter=default --reporter=json --outputFile.json=out/test-results-twin.json >out/test-twin.log 2>&1 &
twin=$!
# (a twin left from an earlier run is taken down by the suite first: look only after that)
while sleep 20 && kill -0 "$twin" 2>/dev/null; do
	if [[ -f "$TWIN_STATE" ]] && node -e 'const s = JSON.parse(require("node:fs").readFileSync(process.argv[1], "utf8")); process.exit(["gateway", "sandbox"].every((r) => s.guests?.[r]?.readyAt) ? 0 : 1)' "$TWIN_STATE" 2>/dev/null; then
		break
	fi
done
status=0
npx vitest run --exclude "$TWIN_SUITE" --reporter=default --reporter=json --outputFile.json=out/test-results.json || status=$?
twin_status=0
wait "$twin" || twin_status=$?
echo "--- ${TWIN_SUITE} ---"
cat out/test-twin.log
if ((status == 0)); then status=$twin_status; fi

# One plain closing line for CI logs, over both.
# shellcheck disable=SC2016 # a JavaScript template literal, not shell
node -e 'const fs = require("node:fs");
const results = ["out/test-results.json", "out/test-results-twin.json"].filter((f) => fs.existsSync(f)).map((f) => JSON.parse(fs.readFileSync(f, "utf8")));
const sum = (key) => results.reduce((n, r) => n + r[key], 0);
const broken = results.reduce((n, r) => n + r.testResults.filter((file) => file.status === "failed").length, 0);
console.log(`${sum("numPassedTests")} passed, ${sum("numFailedTests")} failed, ${sum("numPendingTests") + sum("numTodoTests")} skipped${broken > 0 ? `, ${broken} test files failed` : ""}`);'
exit "$status"
