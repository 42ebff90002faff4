"""The demo inventory's catalogue: the makes, models, trims, powertrains and colours
:mod:`aap.inventory.demo` draws from.

Data only, kept apart from the generator so that each file reads as one thing.
A row's fields are positional (the comment above each table names them): the
generator unpacks millions of rows per run, and tuples are the cheap form.
"""

from __future__ import annotations

from typing import Any

# Combustion powertrain: (fuel, engine, displacement_cc, city_mpg, highway_mpg, transmission)
# Electric powertrain:   ("bev", electric_range_mi, battery_kwh, motor_power_hp, charge_port, dc_fast_charge)
# A catalogue row: fields by position, as the comment above each table says.
Entry = tuple[Any, ...]


def _ev(range_mi: float, kwh: float, hp: float, port: str, dcfc: bool) -> Entry:
    return ("bev", range_mi, kwh, hp, port, dcfc)


A8, A10, CVT, ECVT = "8-speed automatic", "10-speed automatic", "cvt", "e-cvt"

# (make, model, body, base_msrp, trims, powertrains, drivelines, wmi)
CARS: tuple[Entry, ...] = (
    ("Toyota", "Corolla", "sedan", 22500, ("LE", "SE", "XSE"),
     (("gas", "2.0L I4", 1987, 32, 41, CVT), ("hybrid", "1.8L I4 Hybrid", 1798, 53, 46, ECVT)), ("fwd",), "JTD"),
    ("Toyota", "Camry", "sedan", 28400, ("LE", "SE", "XLE", "XSE"),
     (("hybrid", "2.5L I4 Hybrid", 2487, 51, 49, ECVT),), ("fwd", "awd"), "4T1"),
    ("Toyota", "RAV4", "suv", 29800, ("LE", "XLE", "XLE Premium", "Limited"),
     (("gas", "2.5L I4", 2487, 27, 35, A8), ("hybrid", "2.5L I4 Hybrid", 2487, 41, 38, ECVT)), ("fwd", "awd"), "2T3"),
    ("Toyota", "Tacoma", "truck", 32000, ("SR", "SR5", "TRD Off-Road", "Limited"),
     (("gas", "2.4L Turbo I4", 2393, 20, 24, A8),), ("rwd", "4wd"), "3TM"),
    ("Toyota", "Highlander", "suv", 39500, ("LE", "XLE", "Limited", "Platinum"),
     (("gas", "2.4L Turbo I4", 2393, 22, 29, A8), ("hybrid", "2.5L I4 Hybrid", 2487, 36, 35, ECVT)), ("fwd", "awd"), "5TD"),
    ("Toyota", "Sienna", "minivan", 39000, ("LE", "XLE", "XSE", "Platinum"),
     (("hybrid", "2.5L I4 Hybrid", 2487, 36, 36, ECVT),), ("fwd", "awd"), "5TD"),
    ("Toyota", "bZ4X", "suv", 37000, ("XLE", "Limited"),
     (_ev(252, 71.4, 214, "nacs", True),), ("fwd", "awd"), "JTM"),
    ("Honda", "Civic", "sedan", 24000, ("LX", "Sport", "EX", "Touring"),
     (("gas", "2.0L I4", 1996, 31, 40, CVT), ("gas", "1.5L Turbo I4", 1498, 33, 42, CVT)), ("fwd",), "2HG"),
    ("Honda", "Accord", "sedan", 28900, ("LX", "EX", "Sport Hybrid", "Touring Hybrid"),
     (("gas", "1.5L Turbo I4", 1498, 29, 37, CVT), ("hybrid", "2.0L I4 Hybrid", 1993, 51, 44, ECVT)), ("fwd",), "1HG"),
    ("Honda", "CR-V", "suv", 31000, ("LX", "EX", "EX-L", "Sport Touring Hybrid"),
     (("gas", "1.5L Turbo I4", 1498, 28, 34, CVT), ("hybrid", "2.0L I4 Hybrid", 1993, 40, 34, ECVT)), ("fwd", "awd"), "7FA"),
    ("Honda", "Pilot", "suv", 40000, ("Sport", "EX-L", "TrailSport", "Elite"),
     (("gas", "3.5L V6", 3471, 19, 25, A10),), ("fwd", "awd"), "5FN"),
    ("Honda", "Odyssey", "minivan", 39000, ("EX", "EX-L", "Sport", "Elite"),
     (("gas", "3.5L V6", 3471, 19, 28, A10),), ("fwd",), "5FN"),
    ("Honda", "Prologue", "suv", 47400, ("EX", "Touring", "Elite"),
     (_ev(296, 85, 288, "ccs", True),), ("fwd", "awd"), "3GP"),
    ("Ford", "F-150", "truck", 38000, ("XL", "XLT", "Lariat", "Platinum"),
     (("gas", "2.7L EcoBoost V6", 2694, 20, 26, A10), ("gas", "5.0L V8", 4951, 17, 24, A10),
      ("hybrid", "3.5L PowerBoost V6 Hybrid", 3496, 23, 24, A10)), ("rwd", "4wd"), "1FT"),
    ("Ford", "Escape", "suv", 30000, ("Active", "ST-Line", "Platinum"),
     (("gas", "1.5L EcoBoost I3", 1497, 27, 34, A8), ("phev", "2.5L I4 Plug-in Hybrid", 2488, 40, 40, ECVT)), ("fwd", "awd"), "1FM"),
    ("Ford", "Bronco", "suv", 40000, ("Big Bend", "Outer Banks", "Badlands", "Wildtrak"),
     (("gas", "2.7L EcoBoost V6", 2694, 17, 19, A10),), ("4wd",), "1FM"),
    ("Ford", "Mustang Mach-E", "suv", 40000, ("Select", "Premium", "GT"),
     (_ev(300, 91, 290, "nacs", True),), ("rwd", "awd"), "3FM"),
    ("Ford", "Maverick", "truck", 24000, ("XL", "XLT", "Lariat"),
     (("hybrid", "2.5L I4 Hybrid", 2488, 42, 33, ECVT), ("gas", "2.0L EcoBoost I4", 1999, 23, 30, A8)), ("fwd", "awd"), "3FT"),
    ("Chevrolet", "Silverado 1500", "truck", 38000, ("WT", "LT", "RST", "High Country"),
     (("gas", "5.3L V8", 5328, 16, 21, A10), ("diesel", "3.0L Duramax I6 Turbo Diesel", 2993, 23, 29, A10)), ("rwd", "4wd"), "1GC"),
    ("Chevrolet", "Equinox", "suv", 28000, ("LT", "RS", "ACTIV"),
     (("gas", "1.5L Turbo I4", 1490, 25, 31, A8),), ("fwd", "awd"), "3GN"),
    ("Chevrolet", "Equinox EV", "suv", 34995, ("LT", "RS"),
     (_ev(319, 85, 213, "ccs", True),), ("fwd", "awd"), "3GN"),
    ("Chevrolet", "Tahoe", "suv", 58000, ("LS", "LT", "Z71", "High Country"),
     (("gas", "5.3L V8", 5328, 15, 20, A10),), ("rwd", "4wd"), "1GN"),
    ("Chevrolet", "Corvette", "coupe", 68000, ("1LT", "2LT", "3LT"),
     (("gas", "6.2L V8", 6162, 16, 24, "8-speed dual-clutch"),), ("rwd",), "1G1"),
    ("Tesla", "Model 3", "sedan", 42490, ("Long Range", "Performance"),
     (_ev(363, 82, 394, "nacs", True),), ("rwd", "awd"), "5YJ"),
    ("Tesla", "Model Y", "suv", 44990, ("Long Range", "Performance"),
     (_ev(320, 81, 384, "nacs", True),), ("rwd", "awd"), "7SA"),
    ("BMW", "3 Series", "sedan", 45500, ("330i", "330i xDrive", "M340i"),
     (("gas", "2.0L Turbo I4", 1998, 26, 36, A8),), ("rwd", "awd"), "3MW"),
    ("BMW", "X3", "suv", 49500, ("xDrive30", "M50"),
     (("gas", "2.0L Turbo I4", 1998, 25, 29, A8),), ("awd",), "5UX"),
    ("BMW", "X5", "suv", 67600, ("sDrive40i", "xDrive40i", "xDrive50e"),
     (("gas", "3.0L Turbo I6", 2998, 21, 26, A8), ("phev", "3.0L Turbo I6 Plug-in Hybrid", 2998, 22, 22, A8)), ("awd",), "5UX"),
    ("BMW", "i4", "sedan", 57900, ("eDrive35", "eDrive40", "M50"),
     (_ev(307, 83.9, 335, "ccs", True),), ("rwd", "awd"), "WBY"),
    ("Hyundai", "Elantra", "sedan", 22000, ("SE", "SEL", "Limited", "N Line"),
     (("gas", "2.0L I4", 1999, 32, 41, CVT),), ("fwd",), "KMH"),
    ("Hyundai", "Tucson", "suv", 28500, ("SE", "SEL", "N Line", "Limited"),
     (("gas", "2.5L I4", 2497, 25, 32, A8), ("hybrid", "1.6L Turbo I4 Hybrid", 1598, 38, 38, "6-speed automatic")), ("fwd", "awd"), "5NM"),
    ("Hyundai", "Santa Fe", "suv", 34000, ("SE", "SEL", "XRT", "Calligraphy"),
     (("gas", "2.5L Turbo I4", 2497, 20, 28, A8),), ("fwd", "awd"), "5NM"),
    ("Hyundai", "Ioniq 5", "suv", 42600, ("SE", "SEL", "Limited"),
     (_ev(303, 84, 225, "nacs", True),), ("rwd", "awd"), "KM8"),
    ("Kia", "Telluride", "suv", 36500, ("LX", "S", "EX", "SX", "SX X-Pro"),
     (("gas", "3.8L V6", 3778, 20, 26, A8),), ("fwd", "awd"), "5XY"),
    ("Kia", "Sportage", "suv", 28000, ("LX", "EX", "X-Line", "SX"),
     (("gas", "2.5L I4", 2497, 25, 32, A8), ("hybrid", "1.6L Turbo I4 Hybrid", 1598, 43, 44, "6-speed automatic")), ("fwd", "awd"), "KND"),
    ("Kia", "EV6", "suv", 42900, ("Light", "Wind", "GT-Line", "GT"),
     (_ev(310, 84, 320, "ccs", True),), ("rwd", "awd"), "KND"),
    ("Subaru", "Outback", "wagon", 29000, ("Premium", "Limited", "Onyx Edition XT", "Wilderness"),
     (("gas", "2.5L H4", 2498, 26, 32, CVT), ("gas", "2.4L Turbo H4", 2387, 22, 29, CVT)), ("awd",), "4S4"),
    ("Subaru", "Forester", "suv", 30000, ("Premium", "Sport", "Limited", "Touring"),
     (("gas", "2.5L H4", 2498, 26, 33, CVT),), ("awd",), "JF2"),
    ("Subaru", "Crosstrek", "hatchback", 26000, ("Premium", "Sport", "Limited"),
     (("gas", "2.0L H4", 1995, 27, 34, CVT),), ("awd",), "JF2"),
    ("Mazda", "CX-5", "suv", 29000, ("2.5 S", "2.5 S Select", "2.5 S Preferred", "2.5 Turbo Signature"),
     (("gas", "2.5L I4", 2488, 24, 30, "6-speed automatic"),), ("awd",), "JM3"),
    ("Mazda", "Mazda3", "hatchback", 24000, ("2.5 S", "Select Sport", "Preferred", "Premium Plus"),
     (("gas", "2.5L I4", 2488, 27, 35, "6-speed automatic"), ("gas", "2.5L I4", 2488, 26, 35, "6-speed manual")), ("fwd", "awd"), "3MZ"),
    ("Mazda", "MX-5 Miata", "convertible", 29000, ("Sport", "Club", "Grand Touring"),
     (("gas", "2.0L I4", 1998, 26, 34, "6-speed manual"),), ("rwd",), "JM1"),
    ("Volkswagen", "Jetta", "sedan", 22500, ("S", "Sport", "SE", "SEL"),
     (("gas", "1.5L Turbo I4", 1498, 30, 41, A8),), ("fwd",), "3VW"),
    ("Volkswagen", "Tiguan", "suv", 30000, ("S", "SE", "SEL R-Line"),
     (("gas", "2.0L Turbo I4", 1984, 24, 31, A8),), ("fwd", "awd"), "3VV"),
    ("Volkswagen", "ID.4", "suv", 45000, ("Standard", "Pro", "Pro S"),
     (_ev(291, 82, 282, "ccs", True),), ("rwd", "awd"), "1V2"),
    ("Nissan", "Rogue", "suv", 29500, ("S", "SV", "SL", "Platinum"),
     (("gas", "1.5L Turbo I3", 1477, 30, 37, CVT),), ("fwd", "awd"), "5N1"),
    ("Nissan", "Altima", "sedan", 27000, ("S", "SV", "SR", "SL"),
     (("gas", "2.5L I4", 2488, 27, 39, CVT),), ("fwd", "awd"), "1N4"),
    ("Nissan", "Leaf", "hatchback", 28140, ("S", "SV Plus"),
     (_ev(212, 60, 214, "chademo", True),), ("fwd",), "1N4"),
    ("Jeep", "Wrangler", "suv", 33000, ("Sport", "Willys", "Sahara", "Rubicon"),
     (("gas", "3.6L V6", 3604, 17, 23, A8), ("phev", "2.0L Turbo I4 Plug-in Hybrid", 1995, 20, 20, A8)), ("4wd",), "1C4"),
    ("Jeep", "Grand Cherokee", "suv", 40000, ("Laredo", "Limited", "Overland", "Summit"),
     (("gas", "3.6L V6", 3604, 19, 26, A8),), ("4wd",), "1C4"),
    ("Ram", "1500", "truck", 42000, ("Tradesman", "Big Horn", "Laramie", "Limited"),
     (("gas", "3.0L Turbo I6", 2993, 17, 24, A8), ("gas", "5.7L HEMI V8", 5654, 15, 21, A8)), ("rwd", "4wd"), "1C6"),
    ("Lexus", "RX", "suv", 50000, ("350", "350h", "500h F Sport"),
     (("gas", "2.4L Turbo I4", 2393, 22, 28, A8), ("hybrid", "2.5L I4 Hybrid", 2487, 37, 34, ECVT)), ("fwd", "awd"), "2T2"),
    ("Lexus", "ES", "sedan", 43000, ("250", "350", "300h"),
     (("hybrid", "2.5L I4 Hybrid", 2487, 43, 44, ECVT),), ("fwd",), "58A"),
    ("Porsche", "911", "coupe", 116000, ("Carrera", "Carrera S", "Carrera 4S"),
     (("gas", "3.0L Twin-Turbo H6", 2981, 18, 24, "8-speed PDK"),), ("rwd", "awd"), "WP0"),
)

# (make, model, body, msrp, powertrain, wmi, final_drive, wheel_count)
# Combustion motorcycle powertrain: ("gas", engine, displacement_cc, transmission)
MOTORCYCLES: tuple[Entry, ...] = (
    ("Harley-Davidson", "Street Glide", "touring", 28999, ("gas", "1923cc Milwaukee-Eight 117 V-twin", 1923, "6-speed manual"), "1HD", "belt", 2),
    ("Harley-Davidson", "Sportster S", "cruiser", 16499, ("gas", "1252cc Revolution Max 1250T V-twin", 1252, "6-speed manual"), "1HD", "belt", 2),
    ("Harley-Davidson", "Fat Boy 114", "cruiser", 21999, ("gas", "1868cc Milwaukee-Eight 114 V-twin", 1868, "6-speed manual"), "1HD", "belt", 2),
    ("Honda", "Gold Wing Tour", "touring", 28900, ("gas", "1833cc flat-six", 1833, "dct"), "JH2", "shaft", 2),
    ("Honda", "Rebel 500", "cruiser", 6699, ("gas", "471cc parallel twin", 471, "6-speed manual"), "JH2", "chain", 2),
    ("Honda", "Africa Twin", "adventure", 14699, ("gas", "1084cc parallel twin", 1084, "6-speed manual"), "JH2", "chain", 2),
    ("Honda", "CBR650R", "sport", 9899, ("gas", "649cc inline-four", 649, "6-speed manual"), "JH2", "chain", 2),
    ("Honda", "ADV160", "scooter", 4299, ("gas", "157cc single", 157, "automatic"), "MLH", "belt", 2),
    ("Yamaha", "MT-07", "standard", 8599, ("gas", "689cc CP2 parallel twin", 689, "6-speed manual"), "JYA", "chain", 2),
    ("Yamaha", "YZF-R7", "sport", 9199, ("gas", "689cc CP2 parallel twin", 689, "6-speed manual"), "JYA", "chain", 2),
    ("Yamaha", "Tenere 700", "adventure", 10999, ("gas", "689cc CP2 parallel twin", 689, "6-speed manual"), "JYA", "chain", 2),
    ("Kawasaki", "Ninja 400", "sport", 5299, ("gas", "399cc parallel twin", 399, "6-speed manual"), "JKA", "chain", 2),
    ("Kawasaki", "Z900", "standard", 9599, ("gas", "948cc inline-four", 948, "6-speed manual"), "JKA", "chain", 2),
    ("Kawasaki", "Vulcan S", "cruiser", 7549, ("gas", "649cc parallel twin", 649, "6-speed manual"), "JKA", "chain", 2),
    ("BMW", "R 1300 GS", "adventure", 18995, ("gas", "1300cc boxer twin", 1300, "6-speed manual"), "WB1", "shaft", 2),
    ("BMW", "S 1000 RR", "sport", 18695, ("gas", "999cc inline-four", 999, "6-speed manual"), "WB1", "chain", 2),
    ("Ducati", "Monster", "standard", 12395, ("gas", "937cc Testastretta V-twin", 937, "6-speed manual"), "ZDM", "chain", 2),
    ("Ducati", "Multistrada V4 S", "adventure", 25995, ("gas", "1158cc V4 Granturismo", 1158, "6-speed manual"), "ZDM", "chain", 2),
    ("Triumph", "Bonneville T120", "standard", 12995, ("gas", "1200cc parallel twin", 1200, "6-speed manual"), "SMT", "chain", 2),
    ("Triumph", "Tiger 900 GT", "adventure", 15695, ("gas", "888cc inline-triple", 888, "6-speed manual"), "SMT", "chain", 2),
    ("Can-Am", "Spyder RT", "touring", 26999, ("gas", "1330cc inline-triple", 1330, "6-speed semi-automatic"), "2BX", "belt", 3),
    ("Zero", "SR/F", "standard", 20295, _ev(171, 17.3, 110, "j1772", False), "538", "belt", 2),
    ("Zero", "FXE", "supermoto", 12495, _ev(100, 7.2, 46, "j1772", False), "538", "belt", 2),
    ("Zero", "DSR/X", "adventure", 24495, _ev(180, 17.3, 100, "j1772", False), "538", "belt", 2),
    ("LiveWire", "One", "standard", 22799, _ev(146, 15.4, 100, "ccs", True), "1HD", "belt", 2),
    ("LiveWire", "S2 Del Mar", "standard", 15499, _ev(113, 10.5, 84, "j1772", False), "1HD", "belt", 2),
    ("Energica", "Experia", "touring", 28500, _ev(256, 22.5, 102, "ccs", True), "ZEN", "chain", 2),
    ("BMW", "CE 04", "scooter", 12095, _ev(80, 8.9, 42, "j1772", False), "WB1", "belt", 2),
)

# (make, model, body, msrp, length_ft, dry_weight_lbs, sleeps, axles, hitch, wmi)
TRAILERS: tuple[Entry, ...] = (
    ("Airstream", "Bambi 16RB", "travel_trailer", 67900, 16, 3000, 2, 1, "bumper pull", "1ST"),
    ("Airstream", "Flying Cloud 25FB", "travel_trailer", 112900, 25, 5700, 6, 2, "bumper pull", "1ST"),
    ("Jayco", "Jay Flight 264BH", "travel_trailer", 36900, 30, 5800, 8, 2, "bumper pull", "1UJ"),
    ("Forest River", "Cherokee 294GEBG", "travel_trailer", 41500, 34, 7100, 8, 2, "bumper pull", "4X4"),
    ("Grand Design", "Momentum 395G", "toy_hauler", 119000, 44, 15000, 8, 3, "fifth wheel", "573"),
    ("Big Tex", "35SA Utility", "utility", 3200, 12, 1000, 0, 1, "bumper pull", "16V"),
    ("Sure-Trac", "7x14 Enclosed Cargo", "cargo", 8900, 14, 2200, 0, 2, "bumper pull", "5JW"),
)

# (make, model, body, msrp, engine, displacement_cc, fuel, transmission, length_ft, sleeps, chassis, wmi)
RVS: tuple[Entry, ...] = (
    ("Winnebago", "View 24D", "class_c", 189000, "3.0L V6 Turbo Diesel", 2987, "diesel", "9-speed automatic", 25, 4, "Mercedes-Benz Sprinter", "W1X"),
    ("Thor", "Four Winds 28A", "class_c", 139000, "7.3L V8", 7300, "gas", "10-speed automatic", 30, 8, "Ford E-450", "1FD"),
    ("Tiffin", "Allegro Open Road 34PA", "class_a", 199000, "7.3L V8", 7300, "gas", "6-speed automatic", 35, 6, "Ford F-53", "1F6"),
    ("Airstream", "Interstate 24GT", "class_b", 229000, "3.0L V6 Turbo Diesel", 2987, "diesel", "9-speed automatic", 24, 2, "Mercedes-Benz Sprinter", "W1X"),
    ("Winnebago", "Solis 59P", "class_b", 135000, "3.6L V6", 3604, "gas", "9-speed automatic", 21, 4, "Ram ProMaster", "3C6"),
    ("Coachmen", "Leprechaun 319MB", "class_c", 129000, "7.3L V8", 7300, "gas", "10-speed automatic", 32, 8, "Ford E-450", "1FD"),
)

# (make, model, body, msrp, engine, displacement_cc, wmi)
OTHERS: tuple[Entry, ...] = (
    ("Polaris", "RZR XP 1000", "side_by_side", 22999, "999cc parallel twin", 999, "4XA"),
    ("Can-Am", "Maverick X3", "side_by_side", 27999, "900cc turbo triple", 900, "3JB"),
    ("Polaris", "Sportsman 570", "atv", 8999, "567cc single", 567, "4XA"),
)

CAR_COLORS = (
    "Crystal Black Pearl", "Platinum White Pearl", "Lunar Silver Metallic", "Meteorite Gray Metallic",
    "Radiant Red Metallic", "Still Night Pearl", "Oxford White", "Agate Black", "Carbonized Gray",
    "Alpine White", "Snow White Pearl", "Deep Crystal Blue Mica", "Soul Red Crystal Metallic",
    "Velocity Blue", "Cement", "Magnetic Gray Metallic", "Wind Chill Pearl", "Supersonic Red",
)
INTERIORS = (
    "Black Cloth", "Gray Cloth", "Black Leather", "Ivory Leather", "Black SofTex",
    "Saddle Brown Leather", "Gray Leatherette", "Black/Red Sport Cloth",
)
MOTO_COLORS = (
    "Vivid Black", "Gloss Black", "Matte Black", "Pearl White", "Candy Red", "Racing Blue",
    "Storm Gray", "Lime Green", "Lava Orange", "Matte Graphite",
)
TRAILER_COLORS = ("Silver Aluminum", "White Fiberglass", "Black", "Granite Gray", "Polar White")
EXTRA_FEATURES = (
    "Bluetooth", "Keyless entry", "Push-button start", "LED headlights", "Dual-zone climate control",
    "Wireless phone charger", "Power liftgate", "Rain-sensing wipers", "Premium audio",
)
NOTES = ("Recently arrived", "Service history available", "One owner", "Just reduced",
         "Non-smoker vehicle", "Clean title")

# Which demo feature codes make sense on which vehicle type (other codes apply to all types).
FEATURE_TYPES: dict[str, frozenset[str]] = {
    "adaptive_cruise_control": frozenset({"car", "motorcycle", "rv"}),
    "apple_carplay": frozenset({"car", "motorcycle", "rv"}),
    "android_auto": frozenset({"car", "motorcycle", "rv"}),
    "heated_front_seats": frozenset({"car", "rv"}),
    "blind_spot_monitor": frozenset({"car", "motorcycle", "rv"}),
    "lane_keeping_assist": frozenset({"car", "rv"}),
    "backup_camera": frozenset({"car", "rv"}),
    "sunroof": frozenset({"car"}),
    "leather_seats": frozenset({"car", "rv"}),
    "navigation": frozenset({"car", "motorcycle", "rv"}),
    "third_row_seating": frozenset({"car"}),
    "tow_package": frozenset({"car", "rv"}),
    "heated_grips": frozenset({"motorcycle", "other"}),
    "traction_control": frozenset({"motorcycle", "other"}),
}
BODY_ONLY: dict[str, frozenset[str]] = {
    "third_row_seating": frozenset({"suv", "minivan"}),
    "tow_package": frozenset({"suv", "truck", "class_a", "class_c"}),
}
