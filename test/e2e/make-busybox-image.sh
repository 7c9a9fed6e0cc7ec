#!/usr/bin/env bash
# Builds a busybox OCI image archive from Debian's busybox-static, with no
# registry: one layer holding /bin/busybox and a link per applet.
# Usage: make-busybox-image.sh OUT.tar IMAGE-NAME
set -euo pipefail
out=$1
name=$2
bb=$(command -v busybox)
[[ -n "$bb" ]] || { echo "make-busybox-image: busybox-static is not installed" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/rootfs/bin" "$work/rootfs/tmp" "$work/rootfs/etc" "$work/oci/blobs/sha256"
cp "$bb" "$work/rootfs/bin/busybox"
for applet in $("$bb" --list); do
  [[ "$applet" == busybox ]] || ln -sf busybox "$work/rootfs/bin/$applet"
done
echo 'root:x:0:0:root:/root:/bin/sh' >"$work/rootfs/etc/passwd"
echo 'root:x:0:' >"$work/rootfs/etc/group"

# Fixed owner and mtime so the same busybox gives the same digest.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
  -C "$work/rootfs" -cf "$work/layer.tar" .
layer_digest=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
layer_size=$(stat -c %s "$work/layer.tar")
mv "$work/layer.tar" "$work/oci/blobs/sha256/$layer_digest"

blob() { # writes stdin as a blob, prints "digest size"
  local tmp="$work/blob.tmp"
  cat >"$tmp"
  local d s
  d=$(sha256sum "$tmp" | cut -d' ' -f1)
  s=$(stat -c %s "$tmp")
  mv "$tmp" "$work/oci/blobs/sha256/$d"
  echo "$d $s"
}

read -r config_digest config_size < <(printf '%s' \
  '{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin"],"Cmd":["/bin/sleep","2147483647"]},"rootfs":{"type":"layers","diff_ids":["sha256:'"$layer_digest"'"]}}' | blob)
read -r manifest_digest manifest_size < <(printf '%s' \
  '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:'"$config_digest"'","size":'"$config_size"'},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:'"$layer_digest"'","size":'"$layer_size"'}]}' | blob)
printf '%s' '{"imageLayoutVersion":"1.0.0"}' >"$work/oci/oci-layout"
printf '%s' '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:'"$manifest_digest"'","size":'"$manifest_size"',"annotations":{"io.containerd.image.name":"'"$name"'","org.opencontainers.image.ref.name":"'"${name##*:}"'"}}]}' >"$work/oci/index.json"
tar --owner=0 --group=0 --numeric-owner -C "$work/oci" -cf "$out" .
