// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "ContainerFS",
    platforms: [.macOS(.v13)],
    products: [
        .executable(name: "containerfs", targets: ["containerfs"])
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
    ],
    targets: [
        // libfuse3, the few shims Swift cannot express (macros, bit-fields), and the kernel
        // features libfuse 3.14 lacks (passthrough, FUSE over io_uring with liburing).
        .target(
            name: "CFuse",
            cSettings: [.define("_GNU_SOURCE")],
            linkerSettings: [.linkedLibrary("fuse3"), .linkedLibrary("uring"), .linkedLibrary("pthread")]
        ),
        // Linux calls that Glibc's Swift module does not export (openat2, renameat2, O_PATH).
        .target(name: "CLinux", cSettings: [.define("_GNU_SOURCE")]),
        // libarchive, for backup archives (pax tar).
        .target(name: "CArchive", linkerSettings: [.linkedLibrary("archive")]),
        // The rules. Pure: no FUSE, no I/O.
        .target(name: "ContainerPolicy"),
        // The store on disk: layout, state folder, audit log, mount lock.
        .target(
            name: "ContainerStore",
            dependencies: ["ContainerPolicy", "CLinux", "CArchive", .product(name: "Crypto", package: "swift-crypto")]
        ),
        // The FUSE adapter: callbacks → handlers → policy → store.
        .target(name: "ContainerFS", dependencies: ["ContainerPolicy", "ContainerStore", "CFuse", "CLinux"]),
        .executableTarget(
            name: "containerfs",
            dependencies: [
                "ContainerFS", "ContainerStore", "ContainerPolicy",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .testTarget(name: "ContainerPolicyTests", dependencies: ["ContainerPolicy"]),
        .testTarget(name: "ContainerStoreTests", dependencies: ["ContainerStore", "ContainerPolicy"]),
        .testTarget(name: "IntegrationTests", dependencies: ["ContainerStore", "ContainerPolicy", "CLinux"]),
    ],
    swiftLanguageModes: [.v6]
)
