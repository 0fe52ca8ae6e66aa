//! This machine's own interface addresses (getifaddrs): where a next
//! hop must not lead (`deliver/smtp/guard.rs`) and which clients are
//! local (`permit_inet_interfaces`, `intake/rewrite/header_stage.rs`).
//!
//! Trust: the kernel's list. Invariant: read only; every pointer the
//! list holds is checked for null and the list is freed once.
// libc calls the standard library does not wrap; the block says why it
// is sound.
#![allow(unsafe_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The addresses of this machine's interfaces (getifaddrs).
pub fn interface_addrs() -> Vec<IpAddr> {
    let mut found = Vec::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list we only read and
    // free with freeifaddrs; every pointer is checked for null.
    unsafe {
        if libc::getifaddrs(&mut list) != 0 {
            return found;
        }
        let mut cur = list;
        while !cur.is_null() {
            let sa = (*cur).ifa_addr;
            if !sa.is_null() {
                match i32::from((*sa).sa_family) {
                    libc::AF_INET => {
                        let sin = &*(sa as *const libc::sockaddr_in);
                        found.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                            sin.sin_addr.s_addr,
                        ))));
                    }
                    libc::AF_INET6 => {
                        let sin6 = &*(sa as *const libc::sockaddr_in6);
                        found.push(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)));
                    }
                    _ => {}
                }
            }
            cur = (*cur).ifa_next;
        }
        libc::freeifaddrs(list);
    }
    found
}
