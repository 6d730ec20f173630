//! What the emulated device costs: a latency per flush, a latency per write request, and a
//! bandwidth, either from a named preset or set by hand.

use std::fmt;
use std::time::Duration;

/// The timing of one emulated device. A write request costs `write_latency` plus its length
/// over `bytes_per_second`; a flush costs `flush_latency`. Requests are served one at a time,
/// in arrival order, like a device with a queue depth of one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DeviceModel {
    pub flush_latency: Duration,
    pub write_latency: Duration,
    pub bytes_per_second: u64,
    /// What the cache may hold before the device writes it back on its own (a real cache is
    /// a few hundred MiB of DRAM at most; this also bounds the emulator's memory).
    pub cache_capacity_bytes: u64,
}

impl DeviceModel {
    /// No cost at all: the emulator's own floor, for measuring what FUSE and the loop device
    /// add by themselves.
    pub const FREE: DeviceModel = DeviceModel {
        flush_latency: Duration::ZERO,
        write_latency: Duration::ZERO,
        bytes_per_second: 0,
        cache_capacity_bytes: DEFAULT_CACHE_CAPACITY_BYTES,
    };

    /// A model from hand-set figures (`--flush-us`, `--write-us`, `--mbps`); `mbps` 0 means
    /// unlimited bandwidth.
    pub fn by_hand(flush_us: u64, write_us: u64, mbps: u64) -> DeviceModel {
        DeviceModel {
            flush_latency: Duration::from_micros(flush_us),
            write_latency: Duration::from_micros(write_us),
            bytes_per_second: mbps * 1_000_000,
            cache_capacity_bytes: DEFAULT_CACHE_CAPACITY_BYTES,
        }
    }

    /// How long a write request of `bytes` occupies the device.
    pub fn write_cost(&self, bytes: u64) -> Duration {
        // Bandwidth 0 means unlimited: no transfer time.
        let transfer = bytes
            .saturating_mul(1_000_000_000)
            .checked_div(self.bytes_per_second)
            .map_or(Duration::ZERO, Duration::from_nanos);
        self.write_latency + transfer
    }
}

impl fmt::Display for DeviceModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "flush {} µs, write {} µs + ",
            self.flush_latency.as_micros(),
            self.write_latency.as_micros()
        )?;
        if self.bytes_per_second == 0 {
            f.write_str("unlimited bandwidth")
        } else {
            write!(f, "{} MB/s", self.bytes_per_second / 1_000_000)
        }
    }
}

/// 256 MiB: the DRAM cache of a consumer SSD is about 1 MiB per GiB of flash, and what
/// counts here is that a commit's writes fit many times over.
pub const DEFAULT_CACHE_CAPACITY_BYTES: u64 = 256 << 20;

/// Named devices, from the flush latencies measured in the field (collected in issue 16 of
/// this project):
/// - enterprise NVMe with power-loss protection acknowledges a flush from its capacitor-backed
///   cache in ~12–58 µs, and consumer NVMe without it must write its cache to flash first:
///   ~0.25–2 ms, the Samsung 990 Pro ~0.9 ms (16 KiB write + fdatasync, fio; Mark Callaghan,
///   "SSDs, power loss protection and fsync latency", Small Datum blog, January 2026);
/// - a SATA SSD with its write cache on: ~3.5 ms;
/// - eMMC and UFS in phones: several ms (the seeds' MAW and X-FTL papers measured their
///   gains on such devices);
/// - a 7,200 rpm disk: 8–13 ms (a rotation is 8.3 ms, plus a seek).
///
/// Write latencies and bandwidths are the order of magnitude of each class's data sheets
/// (NVMe ~1.5–3 GB/s, SATA ~450 MB/s, eMMC ~100 MB/s random-ish, disk ~150 MB/s); a write
/// only has to reach the cache, so its latency is small even on a disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    NvmePlp,
    Nvme,
    SataSsd,
    Emmc,
    Hdd,
}

impl Preset {
    pub const ALL: [Preset; 5] = [
        Preset::NvmePlp,
        Preset::Nvme,
        Preset::SataSsd,
        Preset::Emmc,
        Preset::Hdd,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Preset::NvmePlp => "nvme-plp",
            Preset::Nvme => "nvme",
            Preset::SataSsd => "sata-ssd",
            Preset::Emmc => "emmc",
            Preset::Hdd => "hdd",
        }
    }

    pub fn parse(name: &str) -> Option<Preset> {
        Preset::ALL.into_iter().find(|preset| preset.name() == name)
    }

    pub fn model(self) -> DeviceModel {
        // (flush µs, write µs, MB/s)
        let (flush_us, write_us, mbps) = match self {
            Preset::NvmePlp => (30, 10, 2_000),
            Preset::Nvme => (1_000, 15, 1_500),
            Preset::SataSsd => (3_500, 40, 450),
            Preset::Emmc => (5_000, 100, 100),
            Preset::Hdd => (10_000, 100, 150),
        };
        DeviceModel::by_hand(flush_us, write_us, mbps)
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_cost_adds_transfer_time() {
        let model = DeviceModel::by_hand(1_000, 15, 1_000);
        assert_eq!(model.write_cost(0), Duration::from_micros(15));
        // 1 MB at 1,000 MB/s is 1 ms.
        assert_eq!(model.write_cost(1_000_000), Duration::from_micros(1_015));
        assert_eq!(DeviceModel::FREE.write_cost(1 << 30), Duration::ZERO);
    }

    #[test]
    fn presets_round_trip_by_name_and_get_slower_down_the_list() {
        for preset in Preset::ALL {
            assert_eq!(Preset::parse(preset.name()), Some(preset));
        }
        let flushes: Vec<Duration> = Preset::ALL.iter().map(|p| p.model().flush_latency).collect();
        assert!(flushes.windows(2).all(|pair| pair[0] < pair[1]), "{flushes:?}");
        assert_eq!(Preset::Nvme.model().flush_latency, Duration::from_millis(1));
        assert_eq!(Preset::parse("floppy"), None);
    }
}
