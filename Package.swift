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
        // libcurl, for the object store: its AWS Signature V4 signer and HTTP(S); typed
        // shims for the variadic curl_easy_setopt.
        .target(name: "CCurl", linkerSettings: [.linkedLibrary("curl")]),
        // The rules. Pure: no FUSE, no I/O.
        .target(name: "ContainerPolicy"),
        // The durability model of a power-loss mount: what each operation makes durable,
        // what a change overwrites, a power cut's report. Pure: no FUSE, no I/O.
        .target(name: "ContainerDurability", dependencies: ["ContainerPolicy"]),
        // The store on disk: opening and creating it, its state folder and locks, the audit
        // log, errors, and delivery into its Inbox.
        .target(name: "ContainerStore", dependencies: ["ContainerPolicy", "CLinux"]),
        // The signed bundle: manifest, scan, signature, installer key.
        .target(
            name: "ContainerSigning",
            dependencies: ["ContainerStore", "ContainerPolicy", "CLinux", .product(name: "Crypto", package: "swift-crypto")]
        ),
        // S3-compatible object stores: configuration as the AWS tools find it, signed
        // requests through libcurl, multipart uploads, downloads, listings.
        .target(
            name: "ContainerObjectStore",
            dependencies: ["ContainerStore", "ContainerPolicy", "CCurl", .product(name: "Crypto", package: "swift-crypto")]
        ),
        // Backups: the backup set and its exclusions, archives (libarchive), restore.
        .target(
            name: "ContainerBackup",
            dependencies: [
                "ContainerSigning", "ContainerStore", "ContainerPolicy", "ContainerObjectStore", "CLinux", "CArchive",
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        // Caches and tmp: tags, last uses, the tag index, purge, usage.
        .target(name: "ContainerPurge", dependencies: ["ContainerStore", "ContainerPolicy", "CLinux"]),
        // Mounting in the background, unmounting, and running a program confined to its
        // container (bubblewrap, signal relay, clean-up).
        .target(name: "ContainerRun", dependencies: ["ContainerDurability", "ContainerSigning", "ContainerPurge", "ContainerStore", "ContainerPolicy", "CLinux"]),
        // The app's lifecycle: update (a new version over the old one's data) and offload.
        .target(name: "ContainerLifecycle", dependencies: ["ContainerSigning", "ContainerPurge", "ContainerStore", "ContainerPolicy"]),
        // Apple's storage guidelines as rules over a container (`containerfs check`): the
        // facts from the backup set, tmp/ and the audit log, the rules as pure functions,
        // the report as a table, JSON and JUnit XML.
        .target(name: "ContainerCheck", dependencies: ["ContainerBackup", "ContainerPurge", "ContainerStore", "ContainerPolicy"]),
        // The FUSE adapter: callbacks → handlers → policy → store.
        .target(name: "ContainerFS", dependencies: ["ContainerDurability", "ContainerPolicy", "ContainerStore", "ContainerPurge", "CFuse", "CLinux"]),
        // The command line only: parse, call one domain, print.
        .executableTarget(
            name: "containerfs",
            dependencies: [
                "ContainerFS", "ContainerRun", "ContainerBackup", "ContainerCheck", "ContainerLifecycle", "ContainerPurge", "ContainerSigning",
                "ContainerStore", "ContainerPolicy", "ContainerObjectStore", "ContainerDurability",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // SPEC §2's tables, independent of the engine: the policy tests' and the
        // differential fuzz test's oracle.
        .target(name: "PolicySpec", dependencies: ["ContainerPolicy"], path: "Tests/PolicySpec"),
        .testTarget(name: "ContainerPolicyTests", dependencies: ["ContainerPolicy", "PolicySpec"]),
        .testTarget(name: "ContainerDurabilityTests", dependencies: ["ContainerDurability"]),
        .testTarget(name: "ContainerStoreTests", dependencies: ["ContainerStore", "ContainerPolicy"]),
        .testTarget(name: "ContainerSigningTests", dependencies: ["ContainerSigning", "ContainerStore", "ContainerPolicy", "CLinux"]),
        .testTarget(name: "ContainerBackupTests", dependencies: ["ContainerBackup", "ContainerStore", "ContainerPolicy", "CLinux"]),
        .testTarget(name: "ContainerObjectStoreTests", dependencies: ["ContainerObjectStore", "ContainerStore"]),
        .testTarget(name: "ContainerPurgeTests", dependencies: ["ContainerPurge", "ContainerStore", "ContainerPolicy"]),
        .testTarget(name: "ContainerCheckTests", dependencies: ["ContainerCheck", "ContainerStore", "ContainerPolicy"]),
        .testTarget(name: "ContainerRunTests", dependencies: ["ContainerRun", "ContainerStore", "ContainerPolicy"]),
        .testTarget(
            name: "IntegrationTests",
            dependencies: ["ContainerSigning", "ContainerStore", "ContainerPurge", "ContainerPolicy", "PolicySpec", "CLinux"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
