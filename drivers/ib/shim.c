// SPDX-License-Identifier: GPL-2.0
/*
 * One-line shims for the static inline functions and macros of ib_core and the network stack
 * that rox.ko's Rust code needs (they have no symbol to link against). Declared in
 * drivers/ib/bindings_helper.h, so bindgen generates their Rust prototypes. No logic here.
 */
#include "bindings_helper.h"
#include <linux/pci-p2pdma.h>

struct module *rox_shim_this_module(void) { return THIS_MODULE; }
void rox_shim_dev_hold(struct net_device *ndev) { dev_hold(ndev); }
void rox_shim_dev_put(struct net_device *ndev) { dev_put(ndev); }
bool rox_shim_netdev_is_up(const struct net_device *ndev) { return netif_running(ndev) && netif_carrier_ok(ndev); }
struct ib_umem *rox_shim_umem_get(struct ib_device *ibdev, unsigned long addr, size_t size, int access) { return ib_umem_get_va(ibdev, addr, size, access); }
size_t rox_shim_umem_num_dma_blocks(struct ib_umem *umem, unsigned long pgsz) { return ib_umem_num_dma_blocks(umem, pgsz); }
void rox_shim_umem_block_iter_start(struct ib_block_iter *biter, struct ib_umem *umem, unsigned long pgsz) { __rdma_umem_block_iter_start(biter, umem, pgsz); }
bool rox_shim_umem_block_iter_next(struct ib_block_iter *biter) { return __rdma_umem_block_iter_next(biter); }
dma_addr_t rox_shim_block_iter_dma_address(struct ib_block_iter *biter) { return rdma_block_iter_dma_address(biter); }
u64 rox_shim_user_mmap_get_offset(const struct rdma_user_mmap_entry *entry) { return rdma_user_mmap_get_offset(entry); }
pgprot_t rox_shim_pgprot_noncached(pgprot_t prot) { return pgprot_noncached(prot); }
struct ib_udata *rox_shim_attrs_udata(struct uverbs_attr_bundle *attrs) { return attrs ? &attrs->driver_udata : NULL; }
struct ib_ucontext *rox_shim_udata_ucontext(struct ib_udata *udata) { return udata ? rdma_udata_to_uverbs_attr_bundle(udata)->context : NULL; }
const char *rox_shim_dev_name(const struct device *dev) { return dev_name(dev); }
unsigned long rox_shim_vma_size(const struct vm_area_struct *vma) { return vma_pages(vma) << PAGE_SHIFT; }
unsigned int rox_shim_netdev_mtu(const struct net_device *ndev) { return READ_ONCE(ndev->mtu); }
const char *rox_shim_netdev_name(const struct net_device *ndev) { return netdev_name(ndev); }
struct net_device *rox_shim_netdev_notifier_info_to_dev(void *ptr) { return netdev_notifier_info_to_dev(ptr); }
bool rox_shim_netdev_has_mac(const struct net_device *ndev, const u8 *mac) { return ndev->addr_len == ETH_ALEN && ether_addr_equal(ndev->dev_addr, mac); }
struct ib_umem_odp *rox_shim_umem_odp_of_notifier(struct mmu_interval_notifier *mni) { return container_of(mni, struct ib_umem_odp, notifier); }
unsigned long rox_shim_umem_odp_start(struct ib_umem_odp *odp) { return ib_umem_start(odp); }
unsigned long rox_shim_umem_odp_end(struct ib_umem_odp *odp) { return ib_umem_end(odp); }
void rox_shim_umem_odp_lock(struct ib_umem_odp *odp) { mutex_lock(&odp->umem_mutex); }
void rox_shim_umem_odp_unlock(struct ib_umem_odp *odp) { mutex_unlock(&odp->umem_mutex); }
void rox_shim_mmu_interval_set_seq(struct mmu_interval_notifier *mni, unsigned long seq) { mmu_interval_set_seq(mni, seq); }
bool rox_shim_mmu_range_blockable(const struct mmu_notifier_range *range) { return mmu_notifier_range_blockable(range); }
bool rox_shim_umem_odp_page_valid(struct ib_umem_odp *odp, size_t idx) { return odp->map.pfn_list[idx] & HMM_PFN_VALID; }
bool rox_shim_umem_odp_page_writable(struct ib_umem_odp *odp, size_t idx) { return odp->map.pfn_list[idx] & HMM_PFN_WRITE; }
dma_addr_t rox_shim_umem_odp_dma_map_page(struct ib_umem_odp *odp, size_t idx) { struct pci_p2pdma_map_state p2p = {}; return hmm_dma_map_pfn(odp->umem.ibdev->dma_device, &odp->map, idx, &p2p); }
bool rox_shim_umem_odp_dma_mapping_error(struct ib_umem_odp *odp, dma_addr_t addr) { return ib_dma_mapping_error(odp->umem.ibdev, addr); }
unsigned long rox_shim_hmm_pfn_write(void) { return HMM_PFN_WRITE; }
bool rox_shim_ib_device_try_get(struct ib_device *dev) { return ib_device_try_get(dev); }
