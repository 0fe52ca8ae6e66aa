#!/usr/bin/env bash
# packaging/build-deb.sh — builds target/debian/sluice_<version>_<arch>.deb
# with dpkg-deb from the release binary (no cargo-deb needed):
#   /usr/bin/sluice, /lib/systemd/system/sluice.service,
#   /etc/sluice/sluice.toml (a conffile), /usr/share/doc/sluice/,
#   maintainer scripts in packaging/deb/.
# Owners and modes the unit's user needs (root:sluice /etc/sluice, the
# spool, the log, /var/mail/vhosts) are set by postinst, once the user
# exists; the archive itself is all root:root.
# Usage: bash packaging/build-deb.sh   (SLUICE_BUILD=0 to use the binary as
# is; the binary is taken from $CARGO_TARGET_DIR/release when that is set)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
[ "${SLUICE_BUILD:-1}" = 1 ] && cargo build --release --locked >&2
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
ARCH=$(dpkg --print-architecture)
OUT="$REPO/target/debian"
STAGE="$OUT/stage"
rm -rf "$STAGE"
install -d "$STAGE/DEBIAN" "$STAGE/usr/bin" "$STAGE/lib/systemd/system" "$STAGE/usr/share/doc/sluice"
install -d -m 0750 "$STAGE/etc/sluice"
install -m 0755 "$TARGET/release/sluice" "$STAGE/usr/bin/sluice"
strip --strip-debug "$STAGE/usr/bin/sluice" 2>/dev/null || true
install -m 0644 packaging/sluice.service "$STAGE/lib/systemd/system/sluice.service"
install -m 0640 packaging/sluice.toml "$STAGE/etc/sluice/sluice.toml"
install -m 0644 README.md docs/CONFIG.md docs/ARCHITECTURE.md "$STAGE/usr/share/doc/sluice/"
install -m 0755 packaging/deb/postinst packaging/deb/prerm packaging/deb/postrm "$STAGE/DEBIAN/"
echo /etc/sluice/sluice.toml >"$STAGE/DEBIAN/conffiles"
SIZE=$(du -sk --exclude=DEBIAN "$STAGE" | cut -f1)
sed -e "s/@VERSION@/$VERSION/" -e "s/@ARCH@/$ARCH/" -e "s/@SIZE@/$SIZE/" \
    packaging/deb/control.in >"$STAGE/DEBIAN/control"
DEB="$OUT/sluice_${VERSION}_${ARCH}.deb"
dpkg-deb --root-owner-group --build "$STAGE" "$DEB" >&2
echo "$DEB"
