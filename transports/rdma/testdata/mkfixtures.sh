#!/usr/bin/env bash
# Regenerates the sysfs and /dev fixture trees used by the rdma preflight
# tests. Each scenario directory holds sys/ (laid out like /sys) and, when
# the scenario needs device nodes, dev/ (laid out like /dev). See README.md.
#
# The layouts copy what the kernel exposes for these devices: the class
# entries are relative symlinks into /sys/devices, each ib device's
# "device" link points at its PCI function, which holds "driver", "net/"
# and "infiniband_verbs/uverbsN". Attribute values use the kernel's exact
# formats ("4: ACTIVE", "5: LinkUp", "RoCE v2", GIDs as eight groups of
# four hex digits). GID tables are cut to their first entries (real tables
# hold 128 entries on InfiniBand ports and 255 on RoCE ports; the rest are
# all zeros). /dev nodes are empty regular files standing in for the
# character devices, which git cannot store.
set -euo pipefail
cd "$(dirname "$0")"

ZERO_GID=0000:0000:0000:0000:0000:0000:0000:0000

put() { mkdir -p "$(dirname "$1")"; printf '%s\n' "$2" >"$1"; }

# pci_dir ROOT PCI -> path of the PCI function directory under ROOT
pci_dir() { echo "$1/sys/devices/pci0000:00/0000:00:02.0/$2"; }

# hca ROOT NAME PCI DRIVER NODE_TYPE HCA_TYPE FW GUID
hca() {
	local root=$1 name=$2 pci=$3 driver=$4 node_type=$5 hca_type=$6 fw=$7 guid=$8
	local pdir; pdir=$(pci_dir "$root" "$pci")
	local ib=$pdir/infiniband/$name
	mkdir -p "$ib/ports" "$root/sys/class/infiniband" "$root/sys/bus/pci/drivers/$driver"
	put "$ib/node_type" "$node_type"
	put "$ib/node_guid" "$guid"
	put "$ib/sys_image_guid" "$guid"
	put "$ib/fw_ver" "$fw"
	[ -n "$hca_type" ] && put "$ib/hca_type" "$hca_type"
	put "$ib/node_desc" "gpu-node-07 $name"
	ln -sfn ../../../"$pci" "$ib/device"
	ln -sfn ../../../../bus/pci/drivers/"$driver" "$pdir/driver"
	put "$pdir/modalias" "pci:v000015B3d0000101Bsv000015B3sd00000007bc02sc07i00"
	ln -sfn ../../devices/pci0000:00/0000:00:02.0/"$pci"/infiniband/"$name" "$root/sys/class/infiniband/$name"
}

# uverbs ROOT NAME PCI N -> infiniband_verbs/uverbsN for the device, its
# class link, and the uverbs ABI version file
uverbs() {
	local root=$1 name=$2 pci=$3 n=$4
	local pdir; pdir=$(pci_dir "$root" "$pci")
	local u=$pdir/infiniband_verbs/uverbs$n
	put "$u/ibdev" "$name"
	put "$u/abi_version" "1"
	put "$u/dev" "231:$((192 + n))"
	mkdir -p "$root/sys/class/infiniband_verbs"
	ln -sfn ../../devices/pci0000:00/0000:00:02.0/"$pci"/infiniband_verbs/uverbs"$n" "$root/sys/class/infiniband_verbs/uverbs$n"
	put "$root/sys/class/infiniband_verbs/abi_version" "6"
}

# node ROOT N -> the /dev/infiniband/uverbsN stand-in (and rdma_cm)
node() {
	mkdir -p "$1/dev/infiniband"
	: >"$1/dev/infiniband/uverbs$2"
	: >"$1/dev/infiniband/rdma_cm"
}

# netdev ROOT PCI NAME OPERSTATE
netdev() {
	local pdir; pdir=$(pci_dir "$1" "$2")
	put "$pdir/net/$3/operstate" "$4"
}

# port ROOT NAME PCI N STATE PHYS LINK_LAYER LID RATE
port() {
	local pdir; pdir=$(pci_dir "$1" "$3")
	local p=$pdir/infiniband/$2/ports/$4
	put "$p/state" "$5"
	put "$p/phys_state" "$6"
	put "$p/link_layer" "$7"
	put "$p/lid" "$8"
	put "$p/sm_lid" "$8"
	put "$p/rate" "$9"
	mkdir -p "$p/gids" "$p/gid_attrs/types" "$p/gid_attrs/ndevs"
}

# gid ROOT NAME PCI PORT INDEX GID [TYPE [NDEV]]: entries without a type
# are those whose gid_attrs files fail to read (EINVAL) on a live system.
gid() {
	local pdir; pdir=$(pci_dir "$1" "$3")
	local p=$pdir/infiniband/$2/ports/$4
	put "$p/gids/$5" "$6"
	[ $# -ge 7 ] && put "$p/gid_attrs/types/$5" "$7"
	[ $# -ge 8 ] && put "$p/gid_attrs/ndevs/$5" "$8"
	return 0
}

zero_gids() { # ROOT NAME PCI PORT FROM TO
	local i
	for ((i = $5; i <= $6; i++)); do gid "$1" "$2" "$3" "$4" "$i" "$ZERO_GID"; done
}

# ib_hca ROOT NAME PCI UVERBS STATE PHYS GUID NETDEV: a ConnectX-6 HDR
# InfiniBand HCA (mlx5) with one port.
ib_hca() {
	local root=$1 name=$2 pci=$3 n=$4 state=$5 phys=$6 guid=$7 nd=$8
	hca "$root" "$name" "$pci" mlx5_core "1: CA" MT4123 20.39.1002 "$guid"
	local lid=0x1a sm=0x1
	[ "$state" = "4: ACTIVE" ] || lid=0xffff
	port "$root" "$name" "$pci" 1 "$state" "$phys" InfiniBand "$lid" "200 Gb/sec (4X HDR)"
	local g=${guid//:/}
	gid "$root" "$name" "$pci" 1 0 "fe80:0000:0000:0000:${g:0:4}:${g:4:4}:${g:8:4}:${g:12:4}" "IB/RoCE v1"
	zero_gids "$root" "$name" "$pci" 1 1 7
	netdev "$root" "$pci" "$nd" up
	[ -n "$n" ] && uverbs "$root" "$name" "$pci" "$n"
	return 0
}

# roce_nic ROOT NAME PCI UVERBS STATE PHYS NETDEV OPERSTATE GIDS: a
# ConnectX-6 Dx 100GbE port (RoCE). GIDS=full gives the usual table for a
# netdev with an IPv6 link-local and an IPv4 address; GIDS=none an empty one.
roce_nic() {
	local root=$1 name=$2 pci=$3 n=$4 state=$5 phys=$6 nd=$7 oper=$8 gids=$9
	hca "$root" "$name" "$pci" mlx5_core "1: CA" MT4125 22.39.1002 "b83f:d203:00a1:7c5e"
	port "$root" "$name" "$pci" 1 "$state" "$phys" Ethernet 0x0 "100 Gb/sec (2X HDR)"
	if [ "$gids" = full ]; then
		gid "$root" "$name" "$pci" 1 0 "fe80:0000:0000:0000:ba3f:d2ff:fea1:7c5e" "IB/RoCE v1" "$nd"
		gid "$root" "$name" "$pci" 1 1 "fe80:0000:0000:0000:ba3f:d2ff:fea1:7c5e" "RoCE v2" "$nd"
		gid "$root" "$name" "$pci" 1 2 "0000:0000:0000:0000:0000:ffff:0a00:0a07" "IB/RoCE v1" "$nd"
		gid "$root" "$name" "$pci" 1 3 "0000:0000:0000:0000:0000:ffff:0a00:0a07" "RoCE v2" "$nd"
		zero_gids "$root" "$name" "$pci" 1 4 15
	else
		zero_gids "$root" "$name" "$pci" 1 0 15
	fi
	netdev "$root" "$pci" "$nd" "$oper"
	[ -n "$n" ] && uverbs "$root" "$name" "$pci" "$n"
	return 0
}

rm -rf ib-healthy roce-healthy ib-port-down ib-port-init roce-port-down roce-gid-empty \
	no-uverbs no-uverbs-module no-devices efa dev-notdir dev-isdir

# Two healthy ConnectX-6 InfiniBand HCAs, nodes present.
ib_hca ib-healthy mlx5_0 0000:17:00.0 0 "4: ACTIVE" "5: LinkUp" "0c42:a103:00b4:5e20" ib0
ib_hca ib-healthy mlx5_1 0000:3d:00.0 1 "4: ACTIVE" "5: LinkUp" "0c42:a103:00b4:5e38" ib1
node ib-healthy 0
node ib-healthy 1

# A healthy RoCE v2 port.
roce_nic roce-healthy mlx5_0 0000:31:00.0 0 "4: ACTIVE" "5: LinkUp" ens1f0np0 up full
node roce-healthy 0

# InfiniBand port with no link (cable unplugged, switch port down).
ib_hca ib-port-down mlx5_0 0000:17:00.0 0 "1: DOWN" "2: Polling" "0c42:a103:00b4:5e20" ib0
node ib-port-down 0

# InfiniBand port with link but no subnet manager: stays INIT.
ib_hca ib-port-init mlx5_0 0000:17:00.0 0 "2: INIT" "5: LinkUp" "0c42:a103:00b4:5e20" ib0
node ib-port-init 0

# RoCE port whose netdev is administratively down.
roce_nic roce-port-down mlx5_0 0000:31:00.0 0 "1: DOWN" "3: Disabled" ens1f0np0 down full
node roce-port-down 0

# RoCE port up, but its netdev has no addresses: every GID is zero.
roce_nic roce-gid-empty mlx5_0 0000:31:00.0 0 "4: ACTIVE" "5: LinkUp" ens1f0np0 up none
node roce-gid-empty 0

# mlx5_1 has no uverbs device (its user-verbs interface never registered).
ib_hca no-uverbs mlx5_0 0000:17:00.0 0 "4: ACTIVE" "5: LinkUp" "0c42:a103:00b4:5e20" ib0
ib_hca no-uverbs mlx5_1 0000:3d:00.0 "" "4: ACTIVE" "5: LinkUp" "0c42:a103:00b4:5e38" ib1
node no-uverbs 0

# HCA driver loaded but ib_uverbs is not: no class/infiniband_verbs at all.
ib_hca no-uverbs-module mlx5_0 0000:17:00.0 "" "4: ACTIVE" "5: LinkUp" "0c42:a103:00b4:5e20" ib0

# ib_uverbs loaded, no RDMA device.
put no-devices/sys/class/infiniband_verbs/abi_version 6
mkdir -p no-devices/sys/class/infiniband

# An AWS EFA adapter (p5-style name), which verbs lists but RC QPs do not run on.
hca efa rdmap16s27 0000:10:1b.0 efa "7: unspecified" "" 0.0.0.0 "0000:0000:0000:0000"
put "$(pci_dir efa 0000:10:1b.0)/modalias" "pci:v00001D0Fd0000EFA1sv00001D0Fsd0000EFA1bc02sc00i00"
port efa rdmap16s27 0000:10:1b.0 1 "4: ACTIVE" "5: LinkUp" Unknown 0x0 "100 Gb/sec (4X EDR)"
gid efa rdmap16s27 0000:10:1b.0 1 0 "fe80:0000:0000:0000:0488:5fff:fe6e:2a3b" "IB/RoCE v1"
uverbs efa rdmap16s27 0000:10:1b.0 0
node efa 0

# /dev trees whose uverbs path cannot be a device: "infiniband" is a file,
# or uverbs0 is a directory.
mkdir -p dev-notdir/dev && : >dev-notdir/dev/infiniband
mkdir -p dev-isdir/dev/infiniband/uverbs0 && : >dev-isdir/dev/infiniband/uverbs0/.keep

# git keeps no empty directories
find . -type d -empty -exec touch {}/.keep \;
