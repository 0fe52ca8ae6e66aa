#!/usr/bin/env bash
# packaging/build-deb.sh — builds target/debian/sluice_<version>_<arch>.deb
# with dpkg-deb from the release binary (no cargo-deb needed):
#   /usr/bin/sluice, /lib/systemd/system/sluice.service,
#   /etc/sluice/sluice.toml (a conffile), /usr/share/doc/sluice/,
#   man pages (/usr/share/man/man8/sluice*.8.gz) and bash, zsh and fish
#   completions, both made by the packaged binary (`sluice generate`),
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
# Man pages and completions from the binary being packaged (its own clap
# definitions: they describe exactly this binary). Pages gzipped -9n, as
# Debian policy wants (no name or time stamp: reproducible).
MAN8="$STAGE/usr/share/man/man8"
BASH_C="$STAGE/usr/share/bash-completion/completions"
ZSH_C="$STAGE/usr/share/zsh/vendor-completions"
FISH_C="$STAGE/usr/share/fish/vendor_completions.d"
install -d "$MAN8" "$BASH_C" "$ZSH_C" "$FISH_C"
"$STAGE/usr/bin/sluice" generate man "$MAN8" >/dev/null
gzip -9n "$MAN8"/*.8
"$STAGE/usr/bin/sluice" generate completions bash >"$BASH_C/sluice"
"$STAGE/usr/bin/sluice" generate completions zsh >"$ZSH_C/_sluice"
"$STAGE/usr/bin/sluice" generate completions fish >"$FISH_C/sluice.fish"
chmod 0644 "$MAN8"/*.8.gz "$BASH_C/sluice" "$ZSH_C/_sluice" "$FISH_C/sluice.fish"
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
