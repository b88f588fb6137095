import ContainerStore
import Glibc

/// A one-line progress bar on stderr — bytes done, rate, time left — drawn only when
/// stderr is a terminal, at most ten times a second.
final class ProgressBar {
    private let enabled = isatty(2) == 1
    private let label: String
    private let start = monotonicSeconds()
    private var lastDraw = 0.0
    private var drawn = false

    init(_ label: String) {
        self.label = label
    }

    func update(_ done: Int64, _ total: Int64) {
        guard enabled else { return }
        let now = monotonicSeconds()
        guard now - lastDraw >= 0.1 || done >= total else { return }
        lastDraw = now
        let elapsed = max(now - start, 0.001)
        let rate = Double(done) / elapsed
        let fraction = total > 0 ? min(Double(done) / Double(total), 1) : 1
        let width = 24
        let filled = Int(fraction * Double(width))
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
        let left = rate > 0 && done < total ? formatDuration(Double(total - done) / rate) : "0:00"
        let line = "\(label) [\(bar)] \(formatBytes(done)) / \(formatBytes(total))  \(formatBytes(rate < 0x1p63 ? Int64(rate) : .max))/s  \(left) left"
        FileHandleOutput.standardError.write("\r\u{1B}[K" + line)
        drawn = true
    }

    /// Clears the bar, so what follows starts on a clean line.
    func finish() {
        guard enabled, drawn else { return }
        FileHandleOutput.standardError.write("\r\u{1B}[K")
        drawn = false
    }
}

/// Bytes in binary units: `512 B`, `1.5 KiB`, `3.2 GiB`.
func formatBytes(_ bytes: Int64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"]
    var value = Double(bytes)
    var unit = 0
    while value >= 1024, unit < units.count - 1 {
        value /= 1024
        unit += 1
    }
    if unit == 0 { return "\(bytes) B" }
    let rounded = (value * 10).rounded() / 10
    return "\(rounded) \(units[unit])"
}

/// Seconds as `M:SS` (or `H:MM:SS`).
func formatDuration(_ seconds: Double) -> String {
    // A stalled transfer of a huge (sparse) archive estimates more seconds than Int holds.
    let total = seconds.isFinite ? Int(min(max(seconds.rounded(.up), 0), 1e9)) : 0
    let (hours, minutes, secs) = (total / 3600, total / 60 % 60, total % 60)
    let twoDigits = { (value: Int) in value < 10 ? "0\(value)" : "\(value)" }
    return hours > 0 ? "\(hours):\(twoDigits(minutes)):\(twoDigits(secs))" : "\(minutes):\(twoDigits(secs))"
}
