# Sourced by the browser tests (tests/browser.sh, web/test.sh): Debian's chromium, installed if it
# is absent (needs apt and root).
if ! command -v chromium >/dev/null; then
  echo "installing chromium …"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null
fi
