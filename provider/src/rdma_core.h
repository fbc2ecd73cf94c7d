/* The rdma-core 56.1 headers librox's bindings are generated from (build.rs runs bindgen on
 * this file with -I<rdma-core build tree>/include). driver.h pulls in verbs.h, kern-abi.h
 * (with the generated kernel-abi/ib_user_verbs.h), cmd_ioctl.h and config.h. */
#include <config.h>
#include <infiniband/driver.h>
#include <infiniband/kern-abi.h>
