/* inaemu: the K value lanes, unrolled with the preprocessor.
 * INA_FOR_EACH_LANE(X) expands to X(0) X(1) ... X(INA_K - 1). */
#ifndef INA_LANES_P4
#define INA_LANES_P4

#define INA_LANES_0_7(X)   X(0)  X(1)  X(2)  X(3)  X(4)  X(5)  X(6)  X(7)
#define INA_LANES_8_15(X)  X(8)  X(9)  X(10) X(11) X(12) X(13) X(14) X(15)
#define INA_LANES_16_23(X) X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23)
#define INA_LANES_24_31(X) X(24) X(25) X(26) X(27) X(28) X(29) X(30) X(31)
#define INA_LANES_32_39(X) X(32) X(33) X(34) X(35) X(36) X(37) X(38) X(39)
#define INA_LANES_40_47(X) X(40) X(41) X(42) X(43) X(44) X(45) X(46) X(47)
#define INA_LANES_48_55(X) X(48) X(49) X(50) X(51) X(52) X(53) X(54) X(55)
#define INA_LANES_56_63(X) X(56) X(57) X(58) X(59) X(60) X(61) X(62) X(63)

#if INA_K == 8
#define INA_FOR_EACH_LANE(X) INA_LANES_0_7(X)
#elif INA_K == 16
#define INA_FOR_EACH_LANE(X) INA_LANES_0_7(X) INA_LANES_8_15(X)
#elif INA_K == 32
#define INA_FOR_EACH_LANE(X) INA_LANES_0_7(X) INA_LANES_8_15(X) INA_LANES_16_23(X) \
                             INA_LANES_24_31(X)
#elif INA_K == 64
#define INA_FOR_EACH_LANE(X) INA_LANES_0_7(X) INA_LANES_8_15(X) INA_LANES_16_23(X) \
                             INA_LANES_24_31(X) INA_LANES_32_39(X) INA_LANES_40_47(X) \
                             INA_LANES_48_55(X) INA_LANES_56_63(X)
#else
#error "INA_K must be 8, 16, 32 or 64"
#endif

#endif
