#!/bin/sh
# airlock twin: chromium binds its debugging port to loopback only, so socat
# publishes it on 9222 of the container, as chromedp/headless-shell does. The root
# filesystem is read-only: the profile lives in /tmp (a tmpfs in the compose).
set -eu
export HOME=/tmp XDG_CONFIG_HOME=/tmp/.config XDG_CACHE_HOME=/tmp/.cache
socat TCP4-LISTEN:9222,fork,reuseaddr TCP4:127.0.0.1:9223 &
exec chromium-headless-shell --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
	--disable-background-networking --disable-sync --disable-crash-reporter \
	--user-data-dir=/tmp/chromium --remote-debugging-address=127.0.0.1 --remote-debugging-port=9223 "$@"
