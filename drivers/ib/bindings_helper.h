/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The C headers rox.ko's ib_core bindings are generated from (see Kbuild): bindgen reads this
 * file with the kernel's own C flags and drivers/ib/bindgen_parameters (allowlists) and writes
 * ib_bindings_generated.rs into the module's build directory; drivers/ib/bindings.rs include!s it.
 *
 * Static inline functions and macros have no symbol to link against: each one rox uses gets a
 * one-line shim in drivers/ib/shim.c, declared here as rox_shim_*.
 */
#include <linux/netdevice.h>
#include <linux/if_arp.h>
#include <linux/etherdevice.h>
#include <linux/pci.h>
#include <rdma/ib_verbs.h>
#include <rdma/ib_umem.h>
#include <rdma/ib_cache.h>
#include <rdma/ib_mad.h>
#include <rdma/uverbs_ioctl.h>
#include <rdma/ib_addr.h>
#include <rdma/iter.h>
#include <rdma/ib_umem_odp.h>
#include <linux/mmu_notifier.h>
#include <linux/hmm.h>

/* Constants bindgen cannot evaluate from macros (same trick as rust/bindings/bindings_helper.h). */
const unsigned long RUST_CONST_HELPER_PAGE_SIZE = PAGE_SIZE;
const unsigned short RUST_CONST_HELPER_ARPHRD_ETHER = ARPHRD_ETHER;

/* drivers/ib/shim.c */
struct module *rox_shim_this_module(void);
void rox_shim_dev_hold(struct net_device *ndev);
void rox_shim_dev_put(struct net_device *ndev);
bool rox_shim_netdev_is_up(const struct net_device *ndev);
struct ib_umem *rox_shim_umem_get(struct ib_device *ibdev, unsigned long addr, size_t size, int access);
size_t rox_shim_umem_num_dma_blocks(struct ib_umem *umem, unsigned long pgsz);
void rox_shim_umem_block_iter_start(struct ib_block_iter *biter, struct ib_umem *umem, unsigned long pgsz);
bool rox_shim_umem_block_iter_next(struct ib_block_iter *biter);
dma_addr_t rox_shim_block_iter_dma_address(struct ib_block_iter *biter);
u64 rox_shim_user_mmap_get_offset(const struct rdma_user_mmap_entry *entry);
pgprot_t rox_shim_pgprot_noncached(pgprot_t prot);
struct ib_udata *rox_shim_attrs_udata(struct uverbs_attr_bundle *attrs);
struct ib_ucontext *rox_shim_udata_ucontext(struct ib_udata *udata);
const char *rox_shim_dev_name(const struct device *dev);
unsigned long rox_shim_vma_size(const struct vm_area_struct *vma);
unsigned int rox_shim_netdev_mtu(const struct net_device *ndev);
const char *rox_shim_netdev_name(const struct net_device *ndev);
struct net_device *rox_shim_netdev_notifier_info_to_dev(void *ptr);
bool rox_shim_netdev_has_mac(const struct net_device *ndev, const u8 *mac);
struct ib_umem_odp *rox_shim_umem_odp_of_notifier(struct mmu_interval_notifier *mni);
unsigned long rox_shim_umem_odp_start(struct ib_umem_odp *odp);
unsigned long rox_shim_umem_odp_end(struct ib_umem_odp *odp);
void rox_shim_umem_odp_lock(struct ib_umem_odp *odp);
void rox_shim_umem_odp_unlock(struct ib_umem_odp *odp);
void rox_shim_mmu_interval_set_seq(struct mmu_interval_notifier *mni, unsigned long seq);
bool rox_shim_mmu_range_blockable(const struct mmu_notifier_range *range);
bool rox_shim_umem_odp_page_valid(struct ib_umem_odp *odp, size_t idx);
bool rox_shim_umem_odp_page_writable(struct ib_umem_odp *odp, size_t idx);
dma_addr_t rox_shim_umem_odp_dma_map_page(struct ib_umem_odp *odp, size_t idx);
bool rox_shim_umem_odp_dma_mapping_error(struct ib_umem_odp *odp, dma_addr_t addr);
unsigned long rox_shim_hmm_pfn_write(void);
bool rox_shim_ib_device_try_get(struct ib_device *dev);
